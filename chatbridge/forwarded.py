"""The client's address behind the proxies a project trusts, and what a cap counts of it.

Behind a balancer every connection comes from the balancer, and the client's address is in
the ``X-Forwarded-For`` header it adds. Anyone can send that header too, so it is read only on
a connection from a proxy named in ``CHATBRIDGE_TRUSTED_PROXIES`` (addresses or networks;
none by default: the header is never read), and from the right: each trusted proxy appends
the address it was reached from, so the first address, from the right, that is not a trusted
proxy is the client's, and whatever a client wrote into the header itself stays to its left.

``use_forwarded_client`` puts that address in the ASGI scope's ``client``, for every request
(``chatbridge.serving``'s HTTP router) and socket (``chatbridge.origins``, which guards
every WebSocket route) as it arrives: the chat's caps, MCP's callers and Django's
``REMOTE_ADDR`` all read it there. (A call where a request arrives, not a middleware: a
middleware's frame would be resumed for every frame of every socket.) The servers' own
readings of the header (uvicorn's ``--proxy-headers``, on for 127.0.0.1 by
default; daphne's ``--proxy-headers``, for anyone) are left off by the production commands.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Sequence

from django.core.exceptions import ImproperlyConfigured

from chatbridge.asgi_types import Scope
from chatbridge.conf import setting

__all__ = ["client_network", "forwarded_for", "trusted_networks", "use_forwarded_client"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.lru_cache(maxsize=8)
def trusted_networks(entries: Sequence[str]) -> tuple[Network, ...]:
    """``CHATBRIDGE_TRUSTED_PROXIES`` (``entries``, a tuple) as networks; ImproperlyConfigured
    naming an entry that is neither an address nor a network."""
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            raise ImproperlyConfigured(
                f"CHATBRIDGE_TRUSTED_PROXIES: {entry!r} is not an address or a network; "
                "list the addresses (or networks, like 10.0.0.0/8) of the proxies in front "
                "of the app."
            ) from None
    return tuple(networks)


def _address(text: str) -> Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [2001:db8::1]:port
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # 198.51.100.7:port
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _trusted(address: Address, trusted: Sequence[Network]) -> bool:
    return any(address.version == net.version and address in net for net in trusted)


def forwarded_for(
    peer: str, headers: Iterable[tuple[bytes, bytes]], trusted: Sequence[Network]
) -> str:
    """The client's address: ``peer`` (the connection's), or, when ``peer`` is a trusted proxy,
    the address its ``X-Forwarded-For`` names (its lines read in order as one list) walking
    from the right past the trusted proxies. An entry that is not an address ends the walk at
    the last one that was."""
    nearest = _address(peer)
    if nearest is None or not trusted or not _trusted(nearest, trusted):
        return peer
    values = [v.decode("latin-1") for k, v in headers if k.lower() == b"x-forwarded-for"]
    hops = [hop for value in values for hop in value.split(",")]
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            break
        nearest = address
        if not _trusted(address, trusted):
            break
    return str(nearest)


def client_network(address: str) -> str:
    """What a cap per address counts: an IPv4 address, or the /64 of an IPv6 one (a
    subscriber's network: one client may take any address in it); "" when not known."""
    found = _address(address) if address else None
    if found is None:
        return address
    if isinstance(found, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((found, 64), strict=False))
    return str(found)


def use_forwarded_client(scope: Scope) -> None:
    """A request or socket from a trusted proxy gets the client's address (``forwarded_for``)
    as its scope's ``client`` (the setting is read each time; nothing without it)."""
    client = scope.get("client")
    if not client:
        return
    trusted = trusted_networks(tuple(setting("CHATBRIDGE_TRUSTED_PROXIES")))
    if trusted:
        address = forwarded_for(str(client[0]), scope.get("headers") or (), trusted)
        if address != client[0]:
            scope["client"] = (address, 0)
