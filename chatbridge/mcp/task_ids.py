"""Task ids: random, and bound to the caller by a MAC of its Authorization digest.

Keyed like ``requestState`` (the first key mints, every key checks: rotation), so an id is
unguessable, useless to anyone else, and checked by any worker without a database lookup.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Sequence

__all__ = ["TaskIds"]

_PREFIX = "mcpt_"
_MAC_LENGTH = 24
_ID_LENGTH = len(_PREFIX) + 32 + _MAC_LENGTH


class TaskIds:
    """Mints and checks the ids of one server's tasks."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        self.keys = list(keys)

    def _mac(self, key: bytes, nonce: str, caller: str) -> str:
        digest = hmac.new(key, f"{nonce}:{caller}".encode(), hashlib.sha256).hexdigest()
        return digest[:_MAC_LENGTH]

    def new(self, caller: str) -> str:
        nonce = uuid.uuid4().hex
        return f"{_PREFIX}{nonce}{self._mac(self.keys[0], nonce, caller)}"

    def owns(self, caller: str, task_id: str) -> bool:
        """Is ``task_id`` one of ours, minted for ``caller``?"""
        if len(task_id) != _ID_LENGTH or not task_id.startswith(_PREFIX):
            return False
        nonce, mac = task_id[len(_PREFIX) : -_MAC_LENGTH], task_id[-_MAC_LENGTH:]
        return any(hmac.compare_digest(self._mac(k, nonce, caller), mac) for k in self.keys)
