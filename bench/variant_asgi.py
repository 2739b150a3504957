"""Diagnostic variants of ``chatbridge.asgi:application`` (bench/diagnose.py only).

``BENCH_VARIANT`` is a comma-separated list of what to take off the request path, to measure
what each costs; none of this changes the project, it patches the process at import:

- ``noclose``: the consumer skips channels' ``aclose_old_connections()`` thread hop that
  ``AsyncConsumer.dispatch`` does before every handler (group events included).
- ``nophase``: ``DjangoStore.save_phase`` does nothing (no UPDATE per phase change).
- ``norecord``: the ``DjangoRecorder`` status / requested / recorded writes do nothing.
"""

from __future__ import annotations

import os

variant = {v.strip() for v in os.environ.get("BENCH_VARIANT", "").split(",") if v.strip()}

from channels.consumer import get_handler_name  # noqa: E402

from chatbridge.asgi import application as _application  # noqa: E402
from chatbridge.chat import consumers  # noqa: E402
from chatbridge.records import recorder, store  # noqa: E402

if "noclose" in variant:

    async def dispatch(self, message):
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    consumers.ChatConsumer.dispatch = dispatch  # type: ignore[method-assign]

if "nophase" in variant:

    async def save_phase(self, conversation_id, phase):
        return None

    store.DjangoStore.save_phase = save_phase  # type: ignore[method-assign]

if "norecord" in variant:

    async def nothing(self, *args, **kwargs):
        return None

    for name in ("status_changed", "capability_requested", "capability_recorded"):
        setattr(recorder.DjangoRecorder, name, nothing)

application = _application
