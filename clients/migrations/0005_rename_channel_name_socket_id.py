from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('clients', '0004_ended_interests'),
    ]

    operations = [
        migrations.RenameField(
            model_name='durableclient',
            old_name='channel_name',
            new_name='socket_id',
        ),
    ]
