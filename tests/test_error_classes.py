"""The errors ChatBridge defines that are not ``ChatBridgeError``s, named: a new error is one
(one ``except`` catches them all), or is added below with the reason.

Moving one of those below under ``ChatBridgeError`` changes what catches it: the runtime's
``except ChatBridgeError`` sites (``calls/sessions._durably``, ``calls/context.CallState``, the
consumer's ``dispatch_command``) treat a ``ChatBridgeError`` as the call's own outcome. Made
one, ``DatabaseUnavailable`` stopped a call mid-outage instead of waiting for the database
(tests/test_outages.py failed), so each site is to be checked before a class moves."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import chatbridge
from chatbridge import ChatBridgeError

NOT_CHATBRIDGE_ERRORS = {
    # Signals raised and caught inside one module or one worker's listener.
    "chatbridge.cluster.listener.LayerFailedElsewhere",
    "chatbridge.cluster.listener.LayerReconnected",
    "chatbridge.mcp.hosts.ClientGone",
    # A BaseException on purpose, like CancelledError: a tool's ``except Exception`` must not
    # swallow it.
    "chatbridge.calls.session_changes.AnswerChanged",
    # Django's OperationalError as the database layer raises it: an outage waits, a
    # ChatBridgeError stops the call.
    "chatbridge.records.outage.DatabaseUnavailable",
    # pydantic's error type, which a validator raises.
    "chatbridge.author.elicit.AnswerRefused",
    # Would change what a catch site of ChatBridgeError does: the engine's dispatch refuses a
    # ChatBridgeError to the user in its own words ("REFUSED"), and a journal write's is the
    # call's outcome. A lost peer's channel name, a stopped writer or runtime, and a phase
    # bug are the server's failures: INTERNAL_ERROR, or JournalWriteFailed, as now.
    "chatbridge.cluster.reply_channels.NotDelivered",
    "chatbridge.engine.phases.PhaseError",
    "chatbridge.records.writer.WriterNotRunning",
    "chatbridge.runtime.RuntimeNotRunning",
}


def errors_defined() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in pkgutil.walk_packages(chatbridge.__path__, "chatbridge."):
        if ".migrations" in module.name:
            continue
        loaded = importlib.import_module(module.name)
        for name, value in vars(loaded).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == loaded.__name__
                and not name.startswith("_")
            ):
                found[f"{loaded.__name__}.{name}"] = value
    return found


def test_every_error_that_is_not_a_chatbridge_error_is_named_with_its_reason() -> None:
    errors = errors_defined()
    assert len(errors) > 20  # the walk found the package's errors
    stray = {n for n, e in errors.items() if not issubclass(e, ChatBridgeError)}
    assert stray == NOT_CHATBRIDGE_ERRORS
