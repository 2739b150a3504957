"""An operator's abort reason on record, and a final phase for ended calls (issue 15: admin).

Ended calls used to keep the conversation's phase of the moment they ended (often
``executing_tools``); they now end in ``done``, and older rows are brought in line.
"""

from typing import Any

from django.db import migrations, models

FINAL_PHASE = "done"


def finish_phases(apps: Any, schema_editor: Any) -> None:
    ToolSession = apps.get_model("chatbridge_chat", "ToolSession")
    ended = ("completed", "failed", "aborted")
    ToolSession.objects.filter(status__in=ended).exclude(phase=FINAL_PHASE).update(
        phase=FINAL_PHASE
    )


class Migration(migrations.Migration):
    dependencies = [
        ("chatbridge_chat", "0008_toolsession_meta"),
    ]

    operations = [
        migrations.AddField(
            model_name="toolsession",
            name="abort_reason",
            field=models.CharField(
                blank=True,
                default="",
                help_text="the reason an operator gave, as typed (the user reads it)",
                max_length=300,
            ),
        ),
        migrations.RunPython(finish_phases, migrations.RunPython.noop),
    ]
