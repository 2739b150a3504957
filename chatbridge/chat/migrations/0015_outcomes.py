"""ToolSession.outcome: how a call ended, as a value (chatbridge.calls.outcome). Calls that ended
before it existed get theirs from the columns they were recorded with, once, here."""

from typing import Any

from django.db import migrations, models

STOPPERS = {"user": "user", "server": "server", "expiry": "expiry", "mcp-client": "client"}
STOPPERS["mcp-modes"] = "refused"


def recorded_outcome(status: str, result: Any, error: str, by: str, reason: str) -> dict | None:
    if status == "completed":
        return {"kind": "completed", "result": result}
    if status == "failed":
        kind, _, message = error.partition(": ")
        return {"kind": "failed", "error_type": kind, "message": message}
    if status != "aborted":
        return None
    if by == "approval":
        return {"kind": "denied", "reason": error.removeprefix("Denied by the user").strip(" :.")}
    if by.startswith("operator "):
        return {"kind": "aborted", "by": "operator", "who": by[9:], "reason": reason}
    return {"kind": "aborted", "by": STOPPERS.get(by, "system"), "who": "", "reason": error}


def fill(apps: Any, schema_editor: Any) -> None:
    ToolSession = apps.get_model("chatbridge_chat", "ToolSession")  # noqa: N806
    ended = ToolSession.objects.filter(status__in=("completed", "failed", "aborted"))
    for row in ended.only("id", "status", "result", "error", "aborted_by", "abort_reason"):
        outcome = recorded_outcome(
            row.status, row.result, row.error, row.aborted_by, row.abort_reason
        )
        ToolSession.objects.filter(pk=row.pk).update(outcome=outcome)


class Migration(migrations.Migration):
    dependencies = [("chatbridge_chat", "0014_commitments")]

    operations = [
        migrations.AddField(
            model_name="toolsession",
            name="outcome",
            field=models.JSONField(
                blank=True,
                help_text="how the call ended, as a value (chatbridge.calls.outcome): completed, "
                "declined, cancelled, denied, aborted by whom and why, or failed",
                null=True,
            ),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
