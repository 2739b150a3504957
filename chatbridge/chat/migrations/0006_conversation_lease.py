"""A conversation's turn lease, and worker heartbeats (issue 13: one turn across workers)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("chatbridge_chat", "0005_tool_session_transport"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="turn_worker",
            field=models.CharField(
                blank=True,
                default="",
                help_text="the worker running a turn (a lease)",
                max_length=120,
            ),
        ),
        migrations.AddField(
            model_name="conversation",
            name="turn_expires",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="WorkerHeartbeat",
            fields=[
                ("worker", models.CharField(max_length=120, primary_key=True, serialize=False)),
                ("beat_at", models.DateTimeField()),
            ],
        ),
    ]
