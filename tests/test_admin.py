"""Operators: the admin and the management command see and stop live tool sessions."""

from __future__ import annotations

import importlib
import io
import re
from datetime import datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import AsyncClient, Client
from django.utils import formats, timezone

from chatbridge.records.models import Conversation, ElicitLink, JournalRecord, Message, ToolSession
from chatbridge.runtime import current_runtime
from tests.chat_client import ChatClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_runtime")]

BOOK = "Book a flight from JFK to LAX"
CHANGELIST = "/admin/chatbridge_chat/toolsession/"
CONVERSATIONS = "/admin/chatbridge_chat/conversation/"
LINKS = "/admin/chatbridge_chat/elicitlink/"


class _Text(HTMLParser):
    """The text a person sees: no tags, scripts or styles, whitespace collapsed."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style", "template"):
            self.hidden += 1
        elif tag == "input" and dict(attrs).get("type") not in ("hidden", "checkbox"):
            self.parts.append(f" [{dict(attrs).get('value') or ''}] ")
        elif tag in ("br", "p", "div", "tr", "li", "h1", "h2", "pre", "td", "th", "summary"):
            self.parts.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "template"):
            self.hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def visible(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return " ".join("".join(parser.parts).split())


def stamp(moment: datetime) -> str:
    """A date and time in the admin's usual localized format."""
    return str(formats.date_format(timezone.localtime(moment), "DATETIME_FORMAT"))


def staff_client() -> Client:
    user = User.objects.create_superuser("ops", password="pw-123456")
    client = Client()
    client.force_login(user)
    return client


def staff_client_again() -> Client:
    client = Client()
    client.force_login(User.objects.get(username="ops"))
    return client


def seed_rows() -> dict[str, Any]:
    """A conversation, its messages, a completed call with a refused answer, a failed call
    and a live one, written straight to the tables (as an older release left them)."""
    now = timezone.now()
    alice = Conversation.objects.create(owner="user:7", title="Trip to Denver")
    bob = Conversation.objects.create(owner="session:abc123", title="Colours")
    Message.objects.create(id="m1", conversation=alice, seq=1, role="user", content="Book it")
    Message.objects.create(
        id="m2",
        conversation=alice,
        seq=2,
        role="assistant",
        tool_calls=[{"id": "call_done", "function": {"name": "book_flight"}}],
    )
    done = ToolSession.objects.create(
        id="call_done",
        conversation=alice,
        tool_name="book_flight",
        arguments={"origin": "JFK", "destination": "DEN", "note": "<b>window</b>"},
        status="completed",
        phase="executing_tools",
        result={"ticket": "TK-1", "seat": "12C"},
        meta={"origin": "http://127.0.0.1", "transport": "chat"},
        ended_at=now - timedelta(minutes=50),
    )
    JournalRecord.objects.create(
        session=done,
        seq=1,
        kind="elicit",
        key="pick_seat",
        request={"key": "pick_seat", "message": "Select your seat", "context": {"rows": 30}},
        result={"action": "accept", "content": {"row": 12, "seat": "C"}},
        rejected=[
            {
                "at": (now - timedelta(minutes=55)).isoformat(),
                "data": {"row": "twelve", "seat": "C"},
                "errors": {
                    "row": ["Input should be a valid integer, unable to parse string as an integer"]
                },
            }
        ],
        requested_at=now - timedelta(minutes=56),
        answered_at=now - timedelta(minutes=55, seconds=56),
    )
    failed = ToolSession.objects.create(
        id="call_failed",
        conversation=bob,
        tool_name="choose_color",
        arguments={"name": "teal"},
        status="failed",
        phase="executing_tools",
        error="ValueError: '#12345G' does not match '^#[0-9a-fA-F]{6}$'",
        ended_at=now - timedelta(minutes=5),
    )
    live = ToolSession.objects.create(
        id="call_live",
        conversation=bob,
        tool_name="choose_color",
        arguments={"name": "red"},
        status="awaiting_elicit",
        phase="plugin_awaiting_elicit",
        pending_key="color",
        pending_message="Pick a colour",
        pending_since=now - timedelta(minutes=3, seconds=5),
        worker="gone:1",
    )
    Message.objects.create(
        id="m3",
        conversation=alice,
        seq=3,
        role="tool",
        tool_call_id="call_done",
        content='{"ticket": "TK-1", "seat": "12C"}',
    )
    ElicitLink.objects.create(
        elicit_id="call_done:payment",
        call_id="call_done",
        tool_name="book_flight",
        key="payment",
        token_hash="0" * 64,
        nonce="n1",
        message="Pay for your ticket",
        params={"amount": 129, "currency": "USD"},
        expires_at=now + timedelta(minutes=15),
        completed_at=now - timedelta(minutes=51),
        result={"paid": True},
    )
    ToolSession.objects.filter(pk=done.pk).update(created_at=now - timedelta(hours=1))
    ToolSession.objects.filter(pk=failed.pk).update(created_at=now - timedelta(days=9))
    ToolSession.objects.filter(pk=live.pk).update(created_at=now - timedelta(hours=2, minutes=1))
    return {"alice": alice, "bob": bob, "now": now}


async def at_seat_picker(chat: ChatClient) -> dict[str, Any]:
    await chat.send_user(BOOK)
    flights = await chat.next("elicit", key="pick_flight")
    await chat.answer(flights, flight_id=flights["context"]["flights"][0]["id"])
    return await chat.next("elicit", key="pick_seat")


async def login(staff: bool) -> AsyncClient:
    name = "ops" if staff else "visitor"
    user = await sync_to_async(User.objects.create_user)(name, password="pw-123456", is_staff=staff)
    if staff:
        user.is_superuser = True
        await user.asave()
    client = AsyncClient()
    await client.aforce_login(user)
    return client


async def change_page(staff: AsyncClient, session_id: str) -> str:
    """The session's admin page, at its key quoted as the admin quotes it."""
    response = await staff.get(f"{CHANGELIST}{quote(session_id)}/change/")
    assert response.status_code == 200, (response.status_code, response.get("Location"))
    return response.content.decode()


async def row(session_id: str) -> ToolSession:
    return await ToolSession.objects.aget(pk=session_id)


async def test_staff_see_the_live_session_and_its_pending_question() -> None:
    chat = await ChatClient.start()
    seats = await at_seat_picker(chat)
    staff = await login(staff=True)

    listing = (await staff.get(CHANGELIST)).content.decode()
    assert seats["session_id"] in listing
    assert "awaiting_elicit" in listing and "pick_seat: Select your seat on" in listing
    today = re.search(r'<a href="\?([^"]+)"[^>]*>Today</a>', listing)
    assert today is not None  # Django's date filter
    query = today.group(1).replace("&amp;", "&")
    filtered = (await staff.get(f"{CHANGELIST}?status=awaiting_elicit&{query}")).content.decode()
    assert seats["session_id"] in filtered
    assert (
        seats["session_id"] not in (await staff.get(CHANGELIST + "?status=failed")).content.decode()
    )

    page = visible(await change_page(staff, seats["session_id"]))
    assert "waiting for pick_seat for" in page and "Abort this session…" in page
    assert "flight_id" in page  # the journal inline shows the first answer

    active = visible((await staff.get(CHANGELIST + "active/")).content.decode())
    assert "Active sessions in the running workers" in active
    assert seats["session_id"] in active and "pick_seat" in active
    assert re.search(r"pick_seat: Select your seat.*? (under a second|\d+ seconds?) \w{3}", active)
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d", active) and not re.search(r"\d s\b", active)
    await chat.close()


async def test_aborting_from_the_admin_stops_the_tool_and_the_chat_shows_it() -> None:
    chat = await ChatClient.start()
    seats = await at_seat_picker(chat)
    staff = await login(staff=True)
    url = f"{CHANGELIST}{quote(seats['session_id'])}/abort/"
    assert f'href="{url}"' in await change_page(staff, seats["session_id"])
    confirm = visible((await staff.get(url)).content.decode())
    assert "Abort 1 live session?" in confirm
    assert f"{seats['session_id']} book_flight" in confirm
    assert "Reason: []" in confirm  # not prefilled: the person reads what the operator writes
    assert 'reads: "An operator stopped this: <reason>". Write it for them.' in confirm
    assert "Yes, abort" in confirm and "No, go back" in confirm
    refused = visible((await staff.post(url, {"reason": "  "})).content.decode())
    assert "This field is required." in refused
    assert (await row(seats["session_id"])).status == "awaiting_elicit"

    response = await staff.post(url, {"reason": "maintenance"})
    assert response.status_code == 302
    ended = await chat.next("tool_call", status="aborted")
    assert ended["error"] == "Aborted by operator ops: maintenance"
    reply = await chat.next("assistant_message")
    assert ended["aborted_by"] == "operator ops"
    assert reply["content"] == (  # the model was told, and does not start it again
        "An operator stopped booking the flight (their reason: maintenance). "
        "I won't start it again by myself; ask me if you still need it."
    )
    await chat.turn_done()
    record = await row(seats["session_id"])
    assert (record.status, record.aborted_by) == ("aborted", "operator ops")
    assert (record.abort_reason, record.phase) == ("maintenance", "done")
    assert ended["outcome"] == {
        "kind": "aborted",
        "by": "operator",
        "who": "ops",
        "reason": "maintenance",
    }
    assert record.outcome == ended["outcome"]
    assert record.aborted_at is not None and record.ended_at is not None
    page = visible(await change_page(staff, seats["session_id"]))
    assert "Aborted by: operator ops" in page and "Abort reason: maintenance" in page
    assert current_runtime().manager.get(seats["session_id"]) is None
    await chat.close()


async def test_the_admin_action_aborts_selected_sessions() -> None:
    chat = await ChatClient.start()
    seats = await at_seat_picker(chat)
    staff = await login(staff=True)
    await sync_to_async(ToolSession.objects.create)(
        id="call_old", tool_name="pick_card", status="completed", ended_at=timezone.now()
    )
    selected = {"action": "abort_sessions", "_selected_action": [seats["session_id"], "call_old"]}
    response = await staff.post(CHANGELIST, selected)
    assert response.status_code == 200  # a confirmation page first; nothing stopped yet
    confirm = visible(response.content.decode())
    assert "Abort 1 live session?" in confirm
    assert f"{seats['session_id']} book_flight" in confirm
    assert "Not live, left alone: call_old pick_card (completed)" in confirm
    assert "Reason: []" in confirm
    assert (await row(seats["session_id"])).status == "awaiting_elicit"

    response = await staff.post(CHANGELIST, {**selected, "post": "yes", "reason": "db upgrade"})
    assert response.status_code == 302
    ended = await chat.next("tool_call", status="aborted")
    assert ended["error"] == "Aborted by operator ops: db upgrade"
    listing = visible((await staff.get(response["Location"])).content.decode())
    assert "Aborted 1 live session: “db upgrade”. 1 selected session was not live." in listing
    record = await row(seats["session_id"])
    assert (record.aborted_by, record.abort_reason) == ("operator ops", "db upgrade")
    assert (await row("call_old")).status == "completed"
    await chat.close()


async def test_non_staff_are_refused() -> None:
    chat = await ChatClient.start()
    seats = await at_seat_picker(chat)
    visitor = await login(staff=False)
    for response in (
        await visitor.get(CHANGELIST),
        await visitor.get(CHANGELIST + "active/"),
        await visitor.post(f"{CHANGELIST}{quote(seats['session_id'])}/abort/", {"reason": "x"}),
    ):
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert (await row(seats["session_id"])).status == "awaiting_elicit"
    assert current_runtime().manager.get(seats["session_id"]) is not None
    await chat.close()


async def test_the_journal_shows_a_rejected_answer_then_the_accepted_one() -> None:
    chat = await ChatClient.start()
    seats = await at_seat_picker(chat)
    await chat.answer(seats, row="twelve", seat="C")
    again = await chat.next("elicit", key="pick_seat")
    taken = set(seats["context"]["seat_map"]["taken"])
    row_number, letter = next(
        (r, s) for r in range(1, 31) for s in "ABCDEF" if f"{r}{s}" not in taken
    )
    await chat.answer(again, row=row_number, seat=letter)
    await chat.review_and_pay()
    result = (await chat.next("tool_call", status="completed"))["result"]
    await chat.turn_done()

    session = await row(seats["session_id"])
    assert session.status == "completed" and session.result == result
    assert session.phase == "done"
    records = [r async for r in JournalRecord.objects.filter(session=session).order_by("seq")]
    assert [(r.seq, r.kind, r.key) for r in records] == [
        (1, "elicit", "pick_flight"),
        (2, "elicit", "pick_seat"),
        (3, "elicit", "review"),
        (4, "elicit", "payment"),
        (5, "step", "issue_ticket"),  # paid: the ticket first, nothing in between
        (6, "sample", "sample"),
    ]
    seat_record = records[1]
    assert seat_record.rejected[0]["data"] == {"row": "twelve", "seat": "C"}
    assert seat_record.rejected[0]["errors"] == {  # the validator's own words, for operators
        "row": ["Input should be a valid integer, unable to parse string as an integer"]
    }
    assert seat_record.result == {
        "action": "accept",
        "content": {"row": row_number, "seat": letter},
    }
    assert (
        seat_record.request["key"] == "pick_seat" and "seat_map" in seat_record.request["context"]
    )
    assert seat_record.latency_seconds is not None and seat_record.latency_seconds >= 0
    assert records[4].result == {"value": result["ticket"]}
    # The table holds the whole journal, in order: what a replay starts from.
    journal = await sync_to_async(session.journal_entries)()
    assert [e["kind"] for e in journal] == ["elicit"] * 4 + ["step", "sample"]

    staff = await login(staff=True)
    page = await change_page(staff, session.id)
    assert "Input should be a valid integer" in page and "twelve" in page
    await chat.close()


async def test_the_management_command_lists_shows_and_aborts() -> None:
    chat = await ChatClient.start()
    seats = await at_seat_picker(chat)
    session_id = seats["session_id"]

    def run(*args: str) -> str:
        out = io.StringIO()
        call_command("chatbridge_sessions", *args, stdout=out)
        return out.getvalue()

    listing = await sync_to_async(run)("list")
    assert re.search(rf"{session_id}\s+book_flight\s+awaiting_elicit\s+pick_seat", listing)
    shown = await sync_to_async(run)("show", session_id)
    assert "1. elicit pick_flight" in shown and "pending pick_seat: Select your seat" in shown
    aborted = await sync_to_async(run)("abort", session_id, "--reason", "cli test")
    assert aborted.startswith(f"Session {session_id} aborted on worker ")
    ended = await chat.next("tool_call", status="aborted")
    assert ended["error"] == "Aborted by operator cli: cli test"
    await chat.turn_done()
    assert "No live sessions." in await sync_to_async(run)("list")
    pruned = await sync_to_async(run)("prune", "--older-than", "0s")
    assert pruned.startswith("Deleted 1 ended session(s)")
    await chat.close()


def test_prune_ages_are_checked() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--older-than must look like 30m, 12h, 7d or 2w"):
        call_command("chatbridge_sessions", "prune", "--older-than", "soon")


def test_read_only_pages_offer_no_save_or_delete_and_no_fields() -> None:
    rows = seed_rows()
    staff = staff_client()
    pages = {
        "session": f"{CHANGELIST}call_done/change/",
        "live session": f"{CHANGELIST}call_live/change/",
        "conversation": f"{CONVERSATIONS}{rows['alice'].pk}/change/",
        "URL question": f"{LINKS}{ElicitLink.objects.get().pk}/change/",
    }
    for what, url in pages.items():
        response = staff.get(url)
        assert response.status_code == 200, what
        html = response.content.decode().split('id="content"', 1)[1]  # the page, not the nav
        text = visible(html)
        assert "Close" in text, what
        for word in ("Save", "Delete", "Save and continue editing"):
            assert word not in text, (what, word)
        fields = re.findall(r"<(?:input|textarea|select)\b[^>]*>", html)
        assert [f for f in fields if 'type="hidden"' not in f] == [], what
        assert staff.post(url, {"status": "completed"}).status_code == 403, what
        assert staff.get(url.replace("/change/", "/delete/")).status_code == 403, what
    # The live session can still be stopped from its page.
    live = visible(staff.get(pages["live session"]).content.decode())
    assert "Abort this session…" in live
    # No bulk delete, no "Add".
    for listing in (CHANGELIST, CONVERSATIONS, LINKS):
        text = visible(staff.get(listing).content.decode().split('id="content"', 1)[1])
        assert "Delete selected" not in text and "Add " not in text
    assert "Abort the selected live sessions" in visible(staff.get(CHANGELIST).content.decode())
    assert ToolSession.objects.get(pk="call_done").status == "completed"


def test_times_read_as_durations_and_local_dates() -> None:
    rows = seed_rows()
    staff = staff_client()
    listing = visible(staff.get(CHANGELIST).content.decode())
    assert "Waiting for" in listing and "Age" in listing
    assert "color: Pick a colour 3 minutes" in listing  # pending question, then how long
    assert "2 hours, 1 minute" in listing and "1 week, 2 days" in listing
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d", listing)

    live = ToolSession.objects.get(pk="call_live")
    page = visible(staff.get(f"{CHANGELIST}call_live/change/").content.decode())
    assert f"Started: {stamp(live.created_at)} (2 hours, 1 minute ago)" in page
    assert "waiting for color for 3 minutes" in page
    done = ToolSession.objects.get(pk="call_done")
    page = visible(staff.get(f"{CHANGELIST}call_done/change/").content.decode())
    assert f"Ended: {stamp(done.ended_at)} (50 minutes ago)" in page
    assert "4 seconds" in page  # the answer's latency
    refused_at = rows["now"] - timedelta(minutes=55)
    assert f'{stamp(refused_at)}: {{"row": "twelve", "seat": "C"}}' in page
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d", page)
    assert not re.search(r"\d s\b", page)


def test_json_is_indented_escaped_and_folded() -> None:
    seed_rows()
    html = staff_client().get(f"{CHANGELIST}call_done/change/").content.decode()
    arguments = (
        "<pre>{\n"
        "  &quot;origin&quot;: &quot;JFK&quot;,\n"
        "  &quot;destination&quot;: &quot;DEN&quot;,\n"
        "  &quot;note&quot;: &quot;&lt;b&gt;window&lt;/b&gt;&quot;\n"
        "}</pre>"
    )
    assert arguments in html and "<b>window</b>" not in html
    assert "<pre>{\n  &quot;ticket&quot;: &quot;TK-1&quot;," in html  # the result
    folded = re.findall(r"<details[^>]*>\s*<summary>(.*?)</summary>\s*<pre>", html, re.S)
    summaries = [visible(s) for s in folded]
    assert "accept: row 12, seat C" in summaries  # the journal's answer
    assert "pick_seat: Select your seat" in summaries  # the journal's request
    assert any(s.startswith("origin: http://127.0.0.1") for s in summaries)  # meta
    text = visible(html)
    assert "{'" not in text and "None" not in text  # no Python reprs
    # A tool message's JSON content and a URL question's answer are folded the same way.
    conversation = Conversation.objects.get(title="Trip to Denver")
    html = staff_client_again().get(f"{CONVERSATIONS}{conversation.pk}/change/").content.decode()
    assert "<pre>{\n  &quot;ticket&quot;: &quot;TK-1&quot;,\n" in html
    assert "book_flight (call_done)" in visible(html)  # the assistant's tool call, summarised
    link = ElicitLink.objects.get()
    html = staff_client_again().get(f"{LINKS}{link.pk}/change/").content.decode()
    assert (
        "<pre>{\n  &quot;amount&quot;: 129,\n  &quot;currency&quot;: &quot;USD&quot;\n}</pre>"
        in html
    )
    page = visible(html)
    assert f"Completed: {stamp(link.completed_at)} (51 minutes ago)" in page
    assert "Answer: paid: true" in page
    assert f'href="{CHANGELIST}{quote("call_done")}/change/"' in html  # its call, key quoted
    listing = visible(staff_client_again().get(LINKS).content.decode())
    assert "call_done:payment book_flight payment answered" in listing


def test_session_list_names_conversation_and_owner_and_filters() -> None:
    rows = seed_rows()
    staff = staff_client()
    html = staff.get(CHANGELIST).content.decode()
    text = visible(html)
    assert "Conversation" in text and "Owner" in text
    link = f'href="{CONVERSATIONS}{rows["alice"].pk}/change/"'
    assert re.search(rf"<a {link}>Trip to Denver</a>", html)
    assert "user:7" in text and "session:abc123" in text
    for heading in ("By status", "By tool", "By started"):
        assert heading in text
    assert "Past 7 days" in text and "Any date" in text
    past_week = re.search(r'<a href="([^"]+)"[^>]*>Past 7 days</a>', html)
    assert past_week is not None
    recent = visible(
        staff.get(CHANGELIST + past_week.group(1).replace("&amp;", "&")).content.decode()
    )
    assert "call_live" in recent and "call_failed" not in recent
    found = visible(staff.get(f"{CHANGELIST}?q=abc123").content.decode())
    assert "call_live" in found and "call_done" not in found
    found = visible(staff.get(f"{CHANGELIST}?q=Denver").content.decode())
    assert "call_done" in found and "call_live" not in found
    # The conversation page lists its tool calls, linked.
    conversation = staff.get(f"{CONVERSATIONS}{rows['alice'].pk}/change/").content.decode()
    assert f'href="{CHANGELIST}{quote("call_done")}/change/"' in conversation


def test_errors_keep_their_technical_text_for_operators() -> None:
    seed_rows()
    staff = staff_client()
    failed = visible(staff.get(f"{CHANGELIST}call_failed/change/").content.decode())
    assert "ValueError: '#12345G' does not match '^#[0-9a-fA-F]{6}$'" in failed
    done = visible(staff.get(f"{CHANGELIST}call_done/change/").content.decode())
    assert (
        "refused: row: Input should be a valid integer, unable to parse string as an integer"
        in done
    )


def test_ended_sessions_show_a_final_phase_and_old_rows_are_fixed() -> None:
    seed_rows()
    from chatbridge.chat import migrations

    # Found by its suffix: the migration may be renumbered when branches are merged.
    (found,) = Path(migrations.__file__).parent.glob("*_abort_reason_final_phase.py")
    migration = importlib.import_module(f"chatbridge.chat.migrations.{found.stem}")
    from django.apps import apps

    migration.finish_phases(apps, None)
    phases = dict(ToolSession.objects.values_list("id", "phase"))
    assert phases == {
        "call_done": "done",
        "call_failed": "done",
        "call_live": "plugin_awaiting_elicit",
    }
    text = visible(staff_client().get(f"{CHANGELIST}call_done/change/").content.decode())
    assert "Phase: done" in text


def test_staff_who_may_only_view_cannot_abort() -> None:
    from django.contrib.auth.models import Permission

    seed_rows()
    viewer = User.objects.create_user("viewer", password="pw-123456", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_toolsession"))
    client = Client()
    client.force_login(viewer)
    page = visible(client.get(f"{CHANGELIST}call_live/change/").content.decode())
    assert "waiting for color for 3 minutes" in page and "Abort this session" not in page
    assert "Abort the selected" not in visible(client.get(CHANGELIST).content.decode())
    assert client.get(f"{CHANGELIST}call_live/abort/").status_code == 403
    assert client.post(f"{CHANGELIST}call_live/abort/", {"reason": "x"}).status_code == 403
    assert ToolSession.objects.get(pk="call_live").status == "awaiting_elicit"


def test_a_session_no_worker_holds_is_marked_aborted_with_its_reason() -> None:
    seed_rows()
    staff = staff_client()
    response = staff.post(f"{CHANGELIST}call_live/abort/", {"reason": "stuck for an hour"})
    assert response.status_code == 302
    page = visible(staff.get(response["Location"]).content.decode())
    assert "Session call_live was held by no running worker; marked aborted." in page
    assert "Phase: done" in page and "Abort reason: stuck for an hour" in page
    assert "Aborted by operator ops: stuck for an hour (no running worker held it)" in page
    assert "Aborted by: operator ops" in page and "Aborted: " in page
    live = ToolSession.objects.get(pk="call_live")
    assert (live.status, live.pending_key, live.pending_schema) == ("aborted", "", None)


def test_the_model_is_told_of_an_abort_no_worker_could_deliver_and_does_not_retry() -> None:
    """The reason "please retry" is the operator's, not the system's: the call stays stopped."""
    from chatbridge.llm.planner import plan_reply
    from chatbridge.records.store import _messages

    seed_rows()
    live = ToolSession.objects.get(pk="call_live")
    assert live.conversation is not None
    Message.objects.create(
        id="m-live",
        conversation=live.conversation,
        seq=10,
        role="assistant",
        tool_calls=[
            {
                "id": "call_live",
                "type": "function",
                "function": {"name": live.tool_name, "arguments": "{}"},
            }
        ],
    )
    staff_client().post(f"{CHANGELIST}call_live/abort/", {"reason": "please retry later"})
    messages = _messages(str(live.conversation.pk))
    told = [m for m in messages if m.get("tool_call_id") == "call_live"]
    assert [m["content"] for m in told] == [
        "Stopped by an operator: an operator ended this tool call on purpose (their reason: "
        "please retry later). Do not retry it; tell the user it was stopped."
    ]
    tools = [{"type": "function", "function": {"name": live.tool_name, "parameters": {}}}]
    reply = plan_reply(messages, tools)
    assert not reply.tool_calls, reply


async def test_a_committed_call_shows_what_became_of_its_commitment() -> None:
    note = {
        "key": "payment",
        "label": "the payment",
        "outcome": "compensated",
        "abort_by": "user",
        "abort_reason": "changed my mind",
        "compensation": {"refund": "RF-1A2B"},
    }
    await ToolSession.objects.acreate(
        id="call_committed",
        tool_name="book_flight",
        status="aborted",
        committed="payment",
        commitment=note,
    )
    await ToolSession.objects.acreate(id="call_plain", tool_name="book_flight", status="completed")
    staff = await login(staff=True)
    page = visible(await change_page(staff, "call_committed"))
    assert "Commitment" in page and "payment" in page
    assert "The payment was undone after the request to stop: refund RF-1A2B." in page
    assert "Commitment" not in visible(await change_page(staff, "call_plain"))


async def test_links_to_a_session_whose_id_looks_quoted_open_that_session() -> None:
    """Django's admin reads _22, _5F and the like in a primary key as quoted characters, so
    about 2.4 % of real call ids (call_22c6…) must be quoted in every link to them."""
    session_id = "call_22c6_5Fbeef"
    await ToolSession.objects.acreate(
        id=session_id,
        tool_name="book_flight",
        status="awaiting_elicit",
        pending_key="pick_seat",
        pending_since=timezone.now() - timedelta(minutes=3),
    )
    staff = await login(staff=True)
    change = await staff.get(f"{CHANGELIST}{quote(session_id)}/change/")
    assert change.status_code == 200 and session_id in visible(change.content.decode())
    # The live box says how long the question has waited (it read "for —" on quoted ids).
    assert "waiting for pick_seat for 3 minutes" in visible(change.content.decode())
    abort_href = re.search(r'href="([^"]*/abort/)"', change.content.decode())
    assert abort_href is not None
    confirm = await staff.get(abort_href[1])
    assert confirm.status_code == 200, confirm.get("Location")
    assert f"{session_id} book_flight" in visible(confirm.content.decode())
    change_href = re.search(r'<li><a href="([^"]*/change/)"', confirm.content.decode())
    assert change_href is not None
    again = await staff.get(change_href[1])
    assert again.status_code == 200 and session_id in visible(again.content.decode())
