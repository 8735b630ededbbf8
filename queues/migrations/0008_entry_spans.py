from django.db import migrations, models


class Migration(migrations.Migration):
    """Queue rows hold a range of seqs (``QueueEntry.through``); every
    existing row holds its one event."""

    dependencies = [
        ("queues", "0007_entry_queue_without_constraint"),
    ]

    operations = [
        migrations.AddField(
            model_name="queueentry",
            name="through",
            field=models.BigIntegerField(default=0),
            preserve_default=False,
        ),
        migrations.RunSQL(
            'UPDATE "queues_queueentry" SET "through" = "seq"',
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
