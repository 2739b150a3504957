"""Building the process's MCP endpoint from the Django settings (the runtime owns it)."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import mcp_types as types
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.module_loading import import_string

from chatbridge.calls.manager import SessionManager
from chatbridge.calls.outcome import BY_SERVER, aborted, describe
from chatbridge.calls.transports import HELD_BY_REQUEST, HOLDER_GONE
from chatbridge.cluster.peers import route_round, route_task
from chatbridge.conf import setting
from chatbridge.installed_plugins import get_registry, get_ui_resources
from chatbridge.mcp.asgi import McpEndpoint
from chatbridge.mcp.callers import Caller
from chatbridge.mcp.events import EventLog, MemoryEventLog, RedisEventLog
from chatbridge.mcp.resource import ResourceServer
from chatbridge.mcp.results import StoredCall, recorded_result
from chatbridge.mcp.server import McpBridge, McpSettings
from chatbridge.mcp.task_cluster import TaskRecord
from chatbridge.mcp.tasks import TRANSPORT
from chatbridge.records import lease
from chatbridge.records.lease import WORKER_ID, CallLease
from chatbridge.records.liveness import holder_alive_elsewhere
from chatbridge.records.mcp_tokens import PREFIX, find_token, on_revocation, revoked_among
from chatbridge.records.models import ACTIVE_STATUSES, JournalRecord, ToolSession, aborted_row
from chatbridge.records.outage import db_call
from chatbridge.records.store import worker_alive

logger = logging.getLogger("chatbridge.mcp")

__all__ = [
    "DjangoCallStore",
    "DjangoTaskCluster",
    "build_mcp_endpoint",
    "check_user_token",
    "state_key",
]


def state_key(secret: str) -> bytes:
    """The requestState sealing key derived from a project secret."""
    return hashlib.sha256(b"chatbridge.mcp.request-state:" + secret.encode()).digest()


def _stored(row: ToolSession) -> StoredCall:
    return StoredCall(
        row.tool_name,
        row.arguments,
        row.journal_entries(),
        row.status,
        row.result,
        row.error,
        row.aborted_by,
        row.commitment,
        row.committed,
        row.outcome,
        row.worker,
    )


def _load(call_id: str) -> StoredCall | None:
    row = ToolSession.objects.filter(pk=call_id).first()
    return _stored(row) if row is not None else None


def _held_call_end(session_id: str, rpc_id: str) -> StoredCall | None:
    """The call a legacy MCP request (``rpc_id`` of session ``session_id``) carried, if it has
    ended on record, or ends now: a call whose worker is gone is ended here as the takeover's
    sweep would (``HOLDER_GONE``; never a committed one, which is being finished). None while
    it lives, or is being finished, or is not known."""
    rows = ToolSession.objects.filter(client=session_id, transport__in=HELD_BY_REQUEST)
    row = rows.filter(meta__rpc_id=rpc_id).order_by("-created_at").first()
    if row is None:
        return None
    if row.status in ACTIVE_STATUSES:
        if row.committed or worker_alive(row.worker):
            return None
        outcome = aborted(HOLDER_GONE, BY_SERVER, None)
        error, now = describe(outcome), timezone.now()
        ended = aborted_row(by=BY_SERVER, error=error, now=now, outcome=outcome)
        if lease.end(row.id, row.worker, ended):
            logger.info("MCP call %s: its worker %r is gone; ended on record", row.id, row.worker)
        row.refresh_from_db()
        if row.status in ACTIVE_STATUSES:
            return None
    return _stored(row)


class DjangoCallStore:
    """MCP calls as the recorder persisted them: resumed by replay after a restart, by the
    worker that claims them (``chatbridge.records.lease``)."""

    worker = WORKER_ID

    async def held_call_end(self, session_id: str, rpc_id: str) -> types.CallToolResult | None:
        """The result for a legacy request whose call ended on record (see ``_held_call_end``)."""
        stored = await db_call(_held_call_end, session_id, rpc_id)
        return recorded_result(stored) if stored is not None else None

    async def load(self, call_id: str) -> StoredCall | None:
        return await sync_to_async(_load)(call_id)

    async def holder_elsewhere(self, call_id: str) -> str | None:
        return await db_call(holder_alive_elsewhere, call_id)

    async def alive(self, worker: str) -> bool:
        return await sync_to_async(worker_alive)(worker)

    async def claim(self, call_id: str, holder: str) -> bool:
        return await CallLease().claim(call_id, holder)

    async def route(self, holder: str, message: dict[str, Any]) -> dict[str, Any] | None:
        return await route_round(holder, message)


def _find_task(call_id: str) -> TaskRecord | None:
    row = ToolSession.objects.filter(pk=call_id, transport=TRANSPORT).first()
    if row is None:
        return None
    call = _stored(row)
    meta = {str(k): str(v) for k, v in (row.meta or {}).items()}
    asked = JournalRecord.objects.filter(session_id=call_id, elicit_id=row.pending_elicit_id)
    entry = asked.last() if row.pending_elicit_id else None
    refused = len(entry.rejected or []) if entry is not None else 0
    return TaskRecord(
        call,
        row.worker,
        row.created_at,
        row.updated_at,
        row.ended_at,
        meta,
        pending=row.pending_elicit_id,
        refused=refused,
    )


class DjangoTaskCluster:
    """Tasks on the database every worker shares, routed through the channel layer."""

    worker = WORKER_ID

    async def find(self, call_id: str) -> TaskRecord | None:
        return await sync_to_async(_find_task)(call_id)

    async def holder_elsewhere(self, call_id: str) -> str | None:
        return await db_call(holder_alive_elsewhere, call_id)

    async def alive(self, worker: str) -> bool:
        return await sync_to_async(worker_alive)(worker)

    async def claim(self, call_id: str, worker: str) -> bool:
        return await CallLease().claim(call_id, worker)

    async def route(self, worker: str, message: dict[str, Any]) -> dict[str, Any] | None:
        return await route_task(worker, message)

    async def end(self, call_id: str, worker: str, reason: str, by: str) -> bool:
        """One worker ends the suspended call (a committed one never: see ``lease.end``)."""
        ended = aborted(reason, by, None)
        row = aborted_row(by=by, error=describe(ended), now=timezone.now(), outcome=ended)
        return await CallLease().end(call_id, worker, row)


async def check_user_token(secret: str) -> Caller | None:
    """A user's MCP token (``McpToken``, created in the admin): its caller, or None."""
    owner = await sync_to_async(find_token)(secret)
    if owner is None:
        return None
    return Caller(owner.identity, owner.identity, owner.meta())


async def revoked_tokens(token_ids: frozenset[str]) -> dict[str, str]:
    """Which of these users' tokens are revoked, on record, and by whom."""
    return await db_call(revoked_among, token_ids)


def django_allowed_hosts() -> list[str]:
    """The hosts Django serves: ``ALLOWED_HOSTS``, or in debug with none set the local names
    Django itself then allows (``HttpRequest.get_host``)."""
    if not settings.ALLOWED_HOSTS and settings.DEBUG:
        return [".localhost", "127.0.0.1", "[::1]"]
    return list(settings.ALLOWED_HOSTS)


def build_mcp_endpoint(manager: SessionManager) -> McpEndpoint:
    """The ``/mcp`` endpoint; its tool calls are sessions of ``manager``."""
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    store = DjangoCallStore()
    bridge = McpBridge(
        get_registry(),
        manager,
        McpSettings(
            state_keys=[state_key(s) for s in secrets],
            state_ttl=setting("CHATBRIDGE_MCP_STATE_TTL"),
            request_timeout=setting("CHATBRIDGE_MCP_REQUEST_TIMEOUT"),
            max_calls_per_caller=setting("CHATBRIDGE_MCP_MAX_CALLS_PER_CALLER"),
        ),
        render_ui=lambda uri: render_to_string(get_ui_resources()[uri], {}),
        store=store,
        cluster=DjangoTaskCluster(),
    )
    redis_url = setting("CHATBRIDGE_MCP_EVENTS_REDIS")
    events: EventLog = (
        RedisEventLog(redis_url, setting("CHATBRIDGE_MCP_EVENTS_PREFIX"))
        if redis_url
        else MemoryEventLog()
    )
    return McpEndpoint(
        bridge,
        allowed_hosts=django_allowed_hosts(),
        trusted_origins=settings.CSRF_TRUSTED_ORIGINS,
        token=setting("CHATBRIDGE_MCP_TOKEN"),
        public=setting("CHATBRIDGE_MCP_PUBLIC"),
        events=events,
        retry_ms=setting("CHATBRIDGE_MCP_SSE_RETRY_MS"),
        check_token=check_user_token,
        sessions_per_caller=setting("CHATBRIDGE_MCP_MAX_SESSIONS_PER_CALLER"),
        session_idle=setting("CHATBRIDGE_MCP_SESSION_IDLE"),
        resource_server=_resource_server(),
        user_token_prefix=PREFIX,
        peers=store,  # requests for legacy sessions other workers hold are relayed to them
        held_ends=store.held_call_end,  # a request's call ended on record, its worker gone
        revoked_among=revoked_tokens,  # what a revoked token has open here ends
        on_revocations=on_revocation,  # a revocation made here is acted on at once
    )


def _resource_server() -> ResourceServer | None:
    """``/mcp`` as an OAuth protected resource, when authorization servers are configured."""
    servers = list(setting("CHATBRIDGE_MCP_AUTHORIZATION_SERVERS"))
    dotted = setting("CHATBRIDGE_MCP_TOKEN_VERIFIER")
    if not servers:
        if dotted:
            raise ImproperlyConfigured(
                "CHATBRIDGE_MCP_TOKEN_VERIFIER checks tokens of an authorization server: name "
                "it in CHATBRIDGE_MCP_AUTHORIZATION_SERVERS too (its issuer URL)."
            )
        return None
    verifier = import_string(dotted) if dotted else None
    if isinstance(verifier, type):
        verifier = verifier()
    return ResourceServer(
        servers,
        django_allowed_hosts(),
        public_url=setting("CHATBRIDGE_PUBLIC_URL"),
        verifier=verifier,
    )
