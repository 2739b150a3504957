"""Counts the reliability tests report, printed at the end of the run."""

from __future__ import annotations

from typing import Any

COUNTS: dict[str, dict[str, Any]] = {}


def report(name: str, **counts: Any) -> None:
    COUNTS[name] = counts
