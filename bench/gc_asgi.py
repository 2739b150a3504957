"""``chatbridge.asgi:application`` with a benchmark hook: SIGUSR1 collects garbage.

On the signal the server runs ``gc.collect()`` (and glibc's ``malloc_trim``, which hands freed
heap pages back to the system as a long-running server's allocator eventually does) and then
writes the number of collections done so far to ``$BENCH_GC_DONE``, so that the benchmark
knows when to read the process's RSS. Used by ``bench/memory_bookings.py`` only.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
from typing import Any

from chatbridge.asgi import application

__all__ = ["application"]

_done = 0


def _collect(signum: int, frame: Any) -> None:
    global _done
    gc.collect()
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    _done += 1
    with open(os.environ["BENCH_GC_DONE"], "w") as out:
        out.write(str(_done))


signal.signal(signal.SIGUSR1, _collect)
