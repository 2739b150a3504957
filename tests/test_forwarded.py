"""The client's address behind the proxies named in CHATBRIDGE_TRUSTED_PROXIES: the header they
add is read only when the connection comes from one of them, from the right, so an address a
client wrote into the header itself never counts; and what a cap counts of an address."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from chatbridge.forwarded import (
    client_network,
    forwarded_for,
    trusted_networks,
    use_forwarded_client,
)

BALANCER = trusted_networks(("10.0.0.5", "192.168.1.0/24"))


def xff(*values: str) -> list[tuple[bytes, bytes]]:
    return [(b"x-forwarded-for", v.encode()) for v in values]


def test_without_trusted_proxies_the_header_is_never_read() -> None:
    assert forwarded_for("198.51.100.7", xff("203.0.113.1"), ()) == "198.51.100.7"


def test_from_a_trusted_proxy_the_address_it_was_given_counts() -> None:
    assert forwarded_for("10.0.0.5", xff("203.0.113.1"), BALANCER) == "203.0.113.1"


def test_an_address_a_client_wrote_into_the_header_does_not_count() -> None:
    # The client sent "X-Forwarded-For: 203.0.113.1"; the balancer added the address it saw.
    headers = xff("203.0.113.1, 198.51.100.7")
    assert forwarded_for("10.0.0.5", headers, BALANCER) == "198.51.100.7"
    # HAProxy adds a header line of its own: the lines are read in order, as one list.
    assert forwarded_for("10.0.0.5", xff("203.0.113.1", "198.51.100.7"), BALANCER) == (
        "198.51.100.7"
    )


def test_a_chain_of_trusted_proxies_is_walked_to_the_first_address_not_among_them() -> None:
    headers = xff("203.0.113.1, 198.51.100.7, 192.168.1.20")
    assert forwarded_for("10.0.0.5", headers, BALANCER) == "198.51.100.7"


def test_a_peer_that_is_not_trusted_is_the_address_whatever_its_header_says() -> None:
    assert forwarded_for("198.51.100.9", xff("203.0.113.1"), BALANCER) == "198.51.100.9"


def test_what_cannot_be_read_as_an_address_ends_the_walk_at_the_last_one_that_could() -> None:
    assert forwarded_for("10.0.0.5", xff("junk, 198.51.100.7"), BALANCER) == "198.51.100.7"
    assert forwarded_for("10.0.0.5", xff("unknown"), BALANCER) == "10.0.0.5"
    assert forwarded_for("10.0.0.5", [], BALANCER) == "10.0.0.5"  # no header: the proxy


def test_a_cap_counts_an_ipv4_address_and_an_ipv6_subscriber_network() -> None:
    assert client_network("198.51.100.7") == "198.51.100.7"
    # One subscriber gets a /64 and may use any address in it.
    assert client_network("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert client_network("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert client_network("::ffff:198.51.100.7") == "198.51.100.7"
    assert client_network("") == ""


def test_a_setting_that_is_not_an_address_stops_the_start_saying_which() -> None:
    with pytest.raises(
        ImproperlyConfigured,
        match=r"CHATBRIDGE_TRUSTED_PROXIES: 'balancer\.local' is not an address or a network",
    ):
        trusted_networks(("10.0.0.5", "balancer.local"))


def test_a_scope_from_a_trusted_proxy_gets_the_forwarded_address() -> None:
    arrived: dict[str, Any] = {"client": ("10.0.0.5", 4242), "headers": xff("203.0.113.1")}
    untrusted = dict(arrived)
    with override_settings(CHATBRIDGE_TRUSTED_PROXIES=["10.0.0.5"]):
        use_forwarded_client(arrived)
    use_forwarded_client(untrusted)  # nothing trusted: the peer
    assert (arrived["client"], untrusted["client"]) == (("203.0.113.1", 0), ("10.0.0.5", 4242))
