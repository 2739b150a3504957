"""``chatbridge.asgi:application`` with profiling, for ``bench/profile_server.py``.

cProfile on the event-loop thread, plus wall time and count of every ``sync_to_async`` call
(the ORM work runs in asgiref's one thread-sensitive executor thread, which cProfile on the
main thread does not see): time queued + running, and time running in the thread. Written to
``$BENCH_PROFILE_OUT`` (.prof and .txt) when the process exits.
"""

from __future__ import annotations

import atexit
import cProfile
import io
import os
import pstats
import threading
import time
from collections import defaultdict
from typing import Any

from asgiref import sync

_profiler = cProfile.Profile()
_calls: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])  # count, wall, in-thread
_lock = threading.Lock()
_original_call = sync.SyncToAsync.__call__
_original_handler = sync.SyncToAsync.thread_handler
_ran = threading.local()


def _key(func: Any) -> str:
    while hasattr(func, "func"):  # functools.partial
        func = func.func
    return f"{getattr(func, '__module__', '')}.{getattr(func, '__qualname__', repr(func))}"


def _timed_handler(
    self: Any, loop: Any, exc_info: Any, task_context: Any, func: Any, *a: Any, **k: Any
) -> Any:
    t = time.perf_counter()
    try:
        return _original_handler(self, loop, exc_info, task_context, func, *a, **k)
    finally:
        with _lock:
            _calls[_key(self.func)][2] += time.perf_counter() - t


async def _timed_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    t0 = time.perf_counter()
    try:
        return await _original_call(self, *args, **kwargs)
    finally:
        with _lock:
            entry = _calls[_key(self.func)]
            entry[0] += 1
            entry[1] += time.perf_counter() - t0


sync.SyncToAsync.thread_handler = _timed_handler  # type: ignore[method-assign]
sync.SyncToAsync.__call__ = _timed_call  # type: ignore[method-assign]

from bench.variant_asgi import application as _application  # noqa: E402  (BENCH_VARIANT)

application = _application


def _dump() -> None:
    _profiler.disable()
    out = os.environ.get("BENCH_PROFILE_OUT", "/tmp/chatbridge-profile")
    _profiler.dump_stats(out + ".prof")
    text = io.StringIO()
    stats = pstats.Stats(_profiler, stream=text)
    stats.sort_stats("tottime").print_stats(35)
    stats.sort_stats("cumulative").print_stats(60)
    text.write("\n\nsync_to_async calls: count, wall ms total (queued+run), in-thread ms total\n")
    for key, (count, wall, ran) in sorted(_calls.items(), key=lambda kv: -kv[1][1]):
        text.write(f"{int(count):7d} {wall * 1000:10.1f} {ran * 1000:10.1f}  {key}\n")
    with open(out + ".txt", "w") as f:
        f.write(text.getvalue())


if os.environ.get("BENCH_PROFILE_OUT"):
    atexit.register(_dump)
    _profiler.enable()
