"""A chat client over real HTTP and WebSockets (aiohttp), for tests against daphne processes."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

# book_flight's payment page takes test cards only; this one is Visa's.
TEST_CARD = {"name": "Ada Lovelace", "number": "4242424242424242", "expiry": "12/39", "cvc": "123"}
_CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


async def pay_over_http(
    http: aiohttp.ClientSession, url: str, card: dict[str, str] = TEST_CARD
) -> str:
    """Fill book_flight's payment page at ``url`` (a URL question's link) on a real server as
    a browser tab would: GET the form, POST the card with the CSRF token of the form and its
    cookie. The done page's text."""
    async with http.get(url) as page:
        assert page.status == 200, (await page.text())[:500]
        html = await page.text()
        cookie = page.cookies["csrftoken"].value
    field = _CSRF_FIELD.search(html)
    assert field is not None, "the payment page has no CSRF token"
    async with http.post(
        url,
        data={**card, "csrfmiddlewaretoken": field[1]},
        headers={"Cookie": f"csrftoken={cookie}"},
    ) as done:
        text = await done.text()
        assert done.status == 200, text[:500]
    return text


def on_server(url: str, base: str | None) -> str:
    """``url`` with its scheme and host replaced by ``base``'s (when given)."""
    if base is None:
        return url
    parts, server = urlsplit(url), urlsplit(base)
    return urlunsplit((server.scheme, server.netloc, parts.path, parts.query, ""))


class RemoteChat:
    """A browser session on a server: its cookie, its conversation, a JSON-protocol socket."""

    def __init__(self, http: aiohttp.ClientSession, cookie: str, conversation_id: str) -> None:
        self.http, self.cookie, self.conversation_id = http, cookie, conversation_id
        self.socket: aiohttp.ClientWebSocketResponse | None = None
        self.events: list[dict[str, Any]] = []

    @classmethod
    async def open(cls, http: aiohttp.ClientSession, base: str) -> RemoteChat:
        async with http.get(f"{base}/", allow_redirects=False) as response:
            cookie = response.cookies["sessionid"].value
            conversation_id = response.headers["Location"].strip("/").split("/")[-1]
        return cls(http, cookie, conversation_id)

    async def connect(self, base: str) -> None:
        if self.socket is not None:
            await self.socket.close()
        ws_base = base.replace("http://", "ws://")
        self.socket = await self.http.ws_connect(
            f"{ws_base}/ws/chat/{self.conversation_id}/?format=json",
            headers={"Origin": base, "Cookie": f"sessionid={self.cookie}"},
        )

    async def send(self, command: dict[str, Any]) -> None:
        assert self.socket is not None
        await self.socket.send_str(json.dumps(command))

    async def next(self, kind: str, timeout: float = 20.0, **match: Any) -> dict[str, Any]:
        assert self.socket is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            assert remaining > 0, f"no {kind} {match}; got {[e['type'] for e in self.events[-12:]]}"
            # Not ``receive(timeout=)``: aiohttp starts that timeout again after each ping it
            # answers, and daphne pings every 20 s, so a wait of 40 s never ended.
            try:
                async with asyncio.timeout(remaining):
                    message = await self.socket.receive()
            except TimeoutError:
                seen = [e["type"] for e in self.events[-12:]]
                raise AssertionError(f"no {kind} {match} in {timeout} s; got {seen}") from None
            assert message.type == aiohttp.WSMsgType.TEXT, message
            event = json.loads(message.data)
            self.events.append(event)
            if event["type"] == kind and all(event.get(k) == v for k, v in match.items()):
                return event

    async def answer(self, form: dict[str, Any], **content: Any) -> None:
        await self.send(
            {
                "type": "elicit_response",
                "session_id": form["session_id"],
                "call_id": form["call_id"],
                "elicit_id": form["elicit_id"],
                "action": "accept",
                "content": content,
            }
        )

    async def book_to_seat(self, timeout: float = 20.0) -> tuple[str, dict[str, Any]]:
        """Ask for a JFK-LAX booking and take the first flight: its id, and the seat question
        that follows."""
        await self.send({"type": "user_message", "text": "Book a flight from JFK to LAX"})
        flights = await self.next("elicit", timeout, key="pick_flight")
        flight_id: str = flights["context"]["flights"][0]["id"]
        await self.answer(flights, flight_id=flight_id)
        return flight_id, await self.next("elicit", timeout, key="pick_seat")

    async def review_and_pay(
        self, timeout: float = 20.0, *, base: str | None = None
    ) -> dict[str, Any]:
        """book_flight after the seat: confirm the review, then pay on the page behind the
        payment question's link (over HTTP); its event. The link names the server the call
        started on; ``base`` sends the browser to another one (that one died, say), as a site
        behind one public address would."""
        review = await self.next("elicit", timeout, key="review")
        await self.answer(review, confirm=True)
        payment = await self.next("elicit", timeout, key="payment")
        await pay_over_http(self.http, on_server(payment["url"], base))
        return payment

    async def close(self) -> None:
        if self.socket is not None:
            await self.socket.close()
