"""``manage.py chatbridge_sessions list|show ID|abort ID|prune --older-than|purge``."""

from __future__ import annotations

import json
import re
from argparse import ArgumentParser
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.timesince import timesince

from chatbridge.chat.operations import abort_tool_session
from chatbridge.conf import setting
from chatbridge.records import retention
from chatbridge.records.models import ACTIVE_STATUSES, ToolSession

UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str) -> timedelta:
    """``90s``, ``30m``, ``12h``, ``7d``, ``2w`` → a timedelta."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhdw])\s*", text)
    if match is None:
        raise CommandError(f"--older-than must look like 30m, 12h, 7d or 2w; got {text!r}")
    return timedelta(**{UNITS[match.group(2)]: int(match.group(1))})


def _short(value: Any, width: int) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


class Command(BaseCommand):
    help = "Inspect and manage ChatBridge tool sessions."

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="table of live sessions")
        show = sub.add_parser("show", help="a session and its journal")
        show.add_argument("session_id")
        abort = sub.add_parser("abort", help="abort a live session wherever it runs")
        abort.add_argument("session_id")
        abort.add_argument("--reason", default="")
        abort.add_argument("--operator", default="cli")
        prune = sub.add_parser("prune", help="delete ended sessions older than an age")
        prune.add_argument("--older-than", required=True, type=parse_age)
        purge = sub.add_parser(
            "purge",
            help="delete ended calls past CHATBRIDGE_RETENTION_DAYS (journals, links, logs)",
        )
        purge.add_argument("--days", type=float, default=None, help="instead of the setting")
        purge.add_argument("--dry-run", action="store_true", help="count, delete nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        getattr(self, f"do_{options['action']}")(**options)

    def do_list(self, **options: Any) -> None:
        live = ToolSession.objects.filter(status__in=ACTIVE_STATUSES).order_by("created_at")
        if not live:
            self.stdout.write("No live sessions.")
            return
        row = "{:<34} {:<14} {:<16} {:<12} {:<10} {:<12} {:<34} {}"
        self.stdout.write(
            row.format(
                "SESSION", "TOOL", "STATUS", "PENDING", "WAITING", "TRANSPORT", "CLIENT", "WORKER"
            )
        )
        for s in live:
            waiting = timesince(s.pending_since) if s.pending_since else "-"
            self.stdout.write(
                row.format(
                    s.id,
                    s.tool_name,
                    s.status,
                    s.pending_key or "-",
                    waiting,
                    s.transport,
                    s.client or "-",
                    s.worker,
                )
            )

    def do_show(self, session_id: str, **options: Any) -> None:
        session = self._get(session_id)
        self.stdout.write(
            f"{session.id}  {session.tool_name}  {session.status}  worker {session.worker}\n"
            f"arguments {json.dumps(session.arguments, ensure_ascii=False)}"
        )
        if session.pending_key:
            self.stdout.write(f"pending {session.pending_key}: {session.pending_message}")
        if session.error:
            self.stdout.write(f"error {session.error}")
        for record in session.journal.all():
            latency = record.latency_seconds
            took = "waiting" if latency is None else f"{latency:.2f}s"
            self.stdout.write(
                f"{record.seq:>3}. {record.kind:<6} {record.key:<16} {took:<8} "
                f"{_short(record.result, 70)}"
            )
            for rejected in record.rejected:
                self.stdout.write(
                    f"       rejected {_short(rejected.get('data'), 40)} "
                    f"{_short(rejected.get('errors'), 60)}"
                )

    def do_abort(self, session_id: str, reason: str, operator: str, **options: Any) -> None:
        session = self._get(session_id)
        self.stdout.write(abort_tool_session(session, operator=operator, reason=reason))

    def do_prune(self, older_than: timedelta, **options: Any) -> None:
        cutoff = timezone.now() - older_than
        old = ToolSession.objects.exclude(status__in=ACTIVE_STATUSES).filter(created_at__lt=cutoff)
        count = old.count()
        old.delete()
        self.stdout.write(
            f"Deleted {count} ended session(s) created before {cutoff:%Y-%m-%d %H:%M}."
        )

    def do_purge(self, days: float | None, dry_run: bool, **options: Any) -> None:
        if days is not None and days <= 0:
            raise CommandError(f"--days must be a positive number of days; got {days:g}")
        if days is None:
            days = setting("CHATBRIDGE_RETENTION_DAYS")
        if days is None:
            self.stdout.write(
                "CHATBRIDGE_RETENTION_DAYS is None: ended calls are kept. Pass --days N to "
                "delete those that ended more than N days ago."
            )
            return
        if dry_run:
            before = retention.cutoff(days)
            assert before is not None
            count = retention.expired(before).count()
            self.stdout.write(
                f"{count} ended call(s) ended before the retention of {days:g} day(s); "
                "nothing deleted (--dry-run)."
            )
            return
        count = retention.purge(days)
        self.stdout.write(
            f"Deleted {count} ended call(s) that ended more than {days:g} day(s) ago, with "
            "their journals, links and log lines."
        )

    def _get(self, session_id: str) -> ToolSession:
        try:
            return ToolSession.objects.get(pk=session_id)
        except ToolSession.DoesNotExist:
            raise CommandError(f"No tool session {session_id!r}.") from None
