"""What one visitor and one client address hold of this process's chat sockets: how many are
open, and the command rate they share.

A cookie costs nothing to mint, so what one visitor (a browser session or a user) may hold is
also capped per client address (``chatbridge.forwarded``: the real one behind a trusted
balancer, an IPv6 address's /64): sockets open at once (``CHATBRIDGE_SOCKETS_PER_VISITOR``,
``…_PER_ADDRESS``) and commands a second (``CHATBRIDGE_WS_RATE``/``_BURST``, shared by the
visitor's sockets, and ``…_PER_ADDRESS``, shared by the address's). Both are counted by each
worker for its own sockets: behind a balancer of N workers one visitor may hold N times as
much, each worker's share of memory and CPU staying bounded. Counting them across workers
would cost a shared write per socket and a Redis round trip per command.

A socket takes its place in two steps, its address's before anything is read (a flood from one
address costs no database read) and its visitor's once its owner is known; ``Seat.leave``
gives both back. A bucket outlives its last socket until it has filled up again, so closing and
opening a socket buys no fresh burst.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils.translation import ngettext

from chatbridge.chat.limits import TokenBucket
from chatbridge.conf import setting

__all__ = ["SOCKETS", "Seat", "SocketCaps"]

SWEEP_EVERY = 256  # places taken between two sweeps of the buckets that filled up
_VISITOR_RATE = ("CHATBRIDGE_WS_RATE", "CHATBRIDGE_WS_BURST")
_ADDRESS_RATE = ("CHATBRIDGE_WS_RATE_PER_ADDRESS", "CHATBRIDGE_WS_BURST_PER_ADDRESS")


@dataclass
class _Holder:
    """A visitor's or an address's sockets here, and their shared bucket."""

    bucket: TokenBucket
    sockets: int = 0


def _visitor_full(count: int) -> str:
    return ngettext(
        "You have %(count)s chat page open in this browser, the most you may have at once. "
        "Close it, then reload this page.",
        "You have %(count)s chat pages open in this browser, the most you may have at once. "
        "Close some of them, then reload this page.",
        count,
    ) % {"count": count}


def _network_full(count: int) -> str:
    return ngettext(
        "%(count)s chat page is open from your network, the most we allow at once. Close it, "
        "then reload this page.",
        "%(count)s chat pages are open from your network, the most we allow at once. Close "
        "some of them, then reload this page.",
        count,
    ) % {"count": count}


class SocketCaps:
    """The sockets of this process, counted per visitor and per address."""

    def __init__(self) -> None:
        self._visitors: dict[str, _Holder] = {}
        self._networks: dict[str, _Holder] = {}
        self._taken = 0

    def seat(self, network: str) -> Seat:
        """A new socket's place, from ``network`` ("" when its address is not known: then
        only its visitor's caps apply)."""
        return Seat(self, network)

    def open_sockets(self, *, visitor: str = "", network: str = "") -> int:
        """How many sockets ``visitor`` (or ``network``) holds here."""
        holder = self._visitors.get(visitor) if visitor else self._networks.get(network)
        return holder.sockets if holder is not None else 0

    def _enter(
        self, holders: dict[str, _Holder], key: str, cap: int | None, rate: tuple[str, str]
    ) -> _Holder | None:
        """``key``'s holder with one more socket; None when it holds ``cap`` already."""
        holder = holders.get(key)
        if holder is None:
            holder = holders[key] = _Holder(TokenBucket(setting(rate[0]), setting(rate[1])))
        if cap is not None and holder.sockets >= cap:
            return None
        holder.sockets += 1
        self._taken += 1
        if self._taken % SWEEP_EVERY == 0:
            self._sweep()
        return holder

    def _leave(self, holders: dict[str, _Holder], key: str) -> None:
        holder = holders.get(key)
        if holder is None:
            return
        holder.sockets -= 1
        if holder.sockets <= 0 and holder.bucket.full:
            del holders[key]

    def _sweep(self) -> None:
        for holders in (self._visitors, self._networks):
            for key in [k for k, h in holders.items() if h.sockets <= 0 and h.bucket.full]:
                del holders[key]


@dataclass
class Seat:
    """One socket's place: its address's, then its visitor's; the buckets it spends from."""

    caps: SocketCaps
    network: str
    visitor: str = ""
    # Its visitor's bucket and its address's: a command spends a token of each (``take_each``).
    buckets: list[TokenBucket] = field(default_factory=list)
    _in_network: bool = False

    def enter_network(self) -> str | None:
        """Take the address's place; why not, in words, when it holds its cap already."""
        if not self.network:
            return None
        cap = setting("CHATBRIDGE_SOCKETS_PER_ADDRESS")
        holder = self.caps._enter(self.caps._networks, self.network, cap, _ADDRESS_RATE)
        if holder is None:
            return _network_full(cap)
        self._in_network = True
        self.buckets.append(holder.bucket)
        return None

    def enter_visitor(self, visitor: str) -> str | None:
        """Take ``visitor``'s place (after the address's); why not, in words."""
        cap = setting("CHATBRIDGE_SOCKETS_PER_VISITOR")
        holder = self.caps._enter(self.caps._visitors, visitor, cap, _VISITOR_RATE)
        if holder is None:
            return _visitor_full(cap)
        self.visitor = visitor
        self.buckets.insert(0, holder.bucket)
        return None

    def leave(self) -> None:
        """Give the places back (once; a seat never taken gives nothing)."""
        if self.visitor:
            self.caps._leave(self.caps._visitors, self.visitor)
            self.visitor = ""
        if self._in_network:
            self.caps._leave(self.caps._networks, self.network)
            self._in_network = False
        self.buckets.clear()


# This process's sockets (as ``chatbridge.cluster.broadcast`` keeps them: they are the process's).
SOCKETS = SocketCaps()
