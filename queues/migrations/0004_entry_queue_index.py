"""Drop the queue entries' index on ``queue`` alone: the unique (queue,
seq) index serves every lookup by queue, and keeping both cost each event
a written page per queue it was appended to.

Only the index goes (found by its columns, whatever its generated name):
an ``AlterField`` would remake the whole table on SQLite.
"""

from django.db import migrations, models
import django.db.models.deletion


def _queue_only_indexes(schema_editor, model):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(
            cursor, model._meta.db_table
        )
    return [
        name
        for name, info in constraints.items()
        if info["index"]
        and not info["unique"]
        and not info["primary_key"]
        and info["columns"] == ["queue_id"]
    ]


def drop_queue_index(apps, schema_editor):
    model = apps.get_model("queues", "QueueEntry")
    for name in _queue_only_indexes(schema_editor, model):
        schema_editor.execute(f"DROP INDEX {schema_editor.quote_name(name)}")


def create_queue_index(apps, schema_editor):
    model = apps.get_model("queues", "QueueEntry")
    if not _queue_only_indexes(schema_editor, model):
        schema_editor.execute(
            schema_editor._create_index_sql(
                model, fields=[model._meta.get_field("queue")]
            )
        )


class Migration(migrations.Migration):

    dependencies = [
        ("queues", "0003_entry_conflates"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="queueentry",
                    name="queue",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="queues.queuestate",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(drop_queue_index, create_queue_index),
            ],
        ),
    ]
