"""Each event once per node (QueuedEvent); queue rows name it by seq."""

from django.db import migrations, models

_COLUMNS = 'seq, event_id, region, "key", op, value, version, ts'


def move_events(apps, schema_editor):
    """Every event the queues hold, once, from their rows (all rows of a
    seq carry the same event)."""
    connection = schema_editor.connection
    QueueEntry = apps.get_model("queues", "QueueEntry")
    QueuedEvent = apps.get_model("queues", "QueuedEvent")
    events, entries = QueuedEvent._meta.db_table, QueueEntry._meta.db_table
    if connection.vendor == "postgresql":
        statement = (
            f"INSERT INTO {events} ({_COLUMNS}) SELECT DISTINCT ON (seq) {_COLUMNS}"
            f" FROM {entries} ORDER BY seq"
        )
    else:
        statement = (
            f"INSERT OR IGNORE INTO {events} ({_COLUMNS}) SELECT {_COLUMNS} FROM {entries}"
        )
    with connection.cursor() as cursor:
        cursor.execute(statement)


class Migration(migrations.Migration):

    dependencies = [
        ("queues", "0005_entry_cq"),
    ]

    operations = [
        migrations.CreateModel(
            name="QueuedEvent",
            fields=[
                ("seq", models.BigIntegerField(primary_key=True, serialize=False)),
                ("event_id", models.CharField(max_length=32)),
                ("region", models.CharField(max_length=128)),
                ("key", models.CharField(max_length=512, null=True)),
                ("op", models.CharField(max_length=16)),
                ("value", models.JSONField(null=True)),
                ("version", models.BigIntegerField(null=True)),
                ("ts", models.DateTimeField()),
            ],
        ),
        migrations.RunPython(move_events, migrations.RunPython.noop),
        migrations.RemoveField(model_name="queueentry", name="event_id"),
        migrations.RemoveField(model_name="queueentry", name="value"),
        migrations.RemoveField(model_name="queueentry", name="version"),
        migrations.RemoveField(model_name="queueentry", name="ts"),
    ]
