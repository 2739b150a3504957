"""Every error ChatBridge raises is a ``ChatBridgeError`` (one ``except`` catches them all; each
keeps the built-in base it is also, such as ``RuntimeError``); only the private signals a
module raises and catches itself are not."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import chatbridge
from chatbridge import ChatBridgeError

# Raised and caught inside one module (or one worker's listener): never seen by a caller; and
# AnswerChanged, a BaseException on purpose (like CancelledError: a tool's ``except
# Exception`` must not swallow it).
SIGNALS = {
    "chatbridge.calls.session_changes.AnswerChanged",
    "chatbridge.cluster.listener.LayerFailedElsewhere",
    "chatbridge.cluster.listener.LayerReconnected",
    "chatbridge.mcp.hosts.ClientGone",
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


def test_every_error_of_chatbridge_is_a_chatbridge_error() -> None:
    errors = errors_defined()
    assert len(errors) > 20  # the walk found the package's errors
    stray = sorted(n for n, e in errors.items() if not issubclass(e, ChatBridgeError))
    assert stray == sorted(SIGNALS)
