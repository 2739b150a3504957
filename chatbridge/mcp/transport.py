"""The SDK's streamable HTTP transport as ``/mcp`` sets it up: its DNS-rebinding protection
from Django's settings, and its log quiet about one race that is no error."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
from mcp.server.transport_security import TransportSecuritySettings

__all__ = ["quiet_session_ended", "transport_security"]


class _SessionEndedFilter(logging.Filter):
    """Drops the SDK's ERROR traceback for a race that is no error (it logs before raising):
    a closed stream under a POST means its session was just ended (``McpEndpoint`` drops the
    message)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (
            isinstance(error, anyio.ClosedResourceError)
            and record.getMessage() == "Error handling POST request"
        )


_SDK_TRANSPORT_LOG = logging.getLogger("mcp.server.streamable_http")
_SESSION_ENDED = _SessionEndedFilter()


def quiet_session_ended() -> None:
    """Install the filter above on the SDK's transport log (once)."""
    if _SESSION_ENDED not in _SDK_TRANSPORT_LOG.filters:
        _SDK_TRANSPORT_LOG.addFilter(_SESSION_ENDED)


def transport_security(
    allowed_hosts: Sequence[str], trusted_origins: Sequence[str] = ()
) -> TransportSecuritySettings:
    """The SDK's DNS-rebinding protection from Django's ``ALLOWED_HOSTS`` (any port) and
    ``CSRF_TRUSTED_ORIGINS``. ``McpEndpoint`` checks origins more strictly (the port too)
    before the SDK sees a request; the SDK's checks stay as a second line, and for ``Host``."""
    hosts = [h.lstrip(".") for h in allowed_hosts]
    if "*" in hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[form for h in hosts for form in (h, f"{h}:*")],
        allowed_origins=[
            *(
                form
                for h in hosts
                for scheme in ("http", "https")
                for form in (f"{scheme}://{h}", f"{scheme}://{h}:*")
            ),
            *(form for o in trusted_origins for form in (o.rstrip("/"), o.rstrip("/").lower())),
        ],
    )
