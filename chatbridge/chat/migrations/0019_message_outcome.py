"""A tool message keeps its call's outcome beside what the model reads (``ToolReply``): the
page shows it for a call without a session row instead of reading the message's text.

Tool messages written before, of calls without a session row, get theirs once here from what
the old page read (an ``Error:`` text failed, anything else completed)."""

import json
from typing import Any

from django.db import migrations, models

_BATCH = 500


def _outcome_of(content: str) -> dict[str, Any]:
    if content.startswith("Error:"):
        why = content.removeprefix("Error:").strip()
        return {"kind": "failed", "error_type": "", "message": why, "refused": None}
    try:
        result: Any = json.loads(content)
    except ValueError:
        result = content
    return {"kind": "completed", "result": result, "done": True}


def keep_outcomes(apps: Any, schema_editor: Any) -> None:
    message_model = apps.get_model("chatbridge_chat", "Message")
    session_model = apps.get_model("chatbridge_chat", "ToolSession")
    recorded = session_model.objects.filter(pk=models.OuterRef("tool_call_id"))
    orphans = message_model.objects.filter(role="tool", outcome__isnull=True).exclude(
        models.Exists(recorded)
    )
    changed = []
    for message in orphans.only("id", "content").iterator(chunk_size=_BATCH):
        message.outcome = _outcome_of(message.content)
        changed.append(message)
    message_model.objects.bulk_update(changed, ["outcome"], batch_size=_BATCH)


class Migration(migrations.Migration):
    dependencies = [
        ("chatbridge_chat", "0018_client_addresses"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="outcome",
            field=models.JSONField(
                blank=True,
                help_text="a tool message's call as it ended (chatbridge.calls.outcome): what "
                "its card shows when the call has no session row (it never started, or "
                "retention removed it)",
                null=True,
            ),
        ),
        migrations.RunPython(keep_outcomes, migrations.RunPython.noop, elidable=True),
    ]
