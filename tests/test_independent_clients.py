"""MCP clients nobody here wrote book a flight against a real server (issue 14, point 5).

The official TypeScript SDK v1 (1.32.2, and 1.17.5 for a 2025-06-18 client), its v2 client
(2.4.0, on 2026-07-28), the official Tasks client on it (ext-tasks 0.2.2) and the MCP Inspector
CLI, pinned in tests/clients/package-lock.json, run as separate node processes against daphne.
Each client script answers questions from what they show (tests/clients/answers.mjs: the first
flight offered, the first free seat, a URL question's page filled in) and prints one JSON
summary; the tests check what a user would: a ticket, the seat chosen, the log and
progress notifications, readable errors. The official conformance suite runs against /mcp too;
/work/notes/conformance.md lists the scenarios that do not apply and why.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from plugins.book_flight.data import search_flights, seat_map_for
from tests.conftest import MCP_REQUEST_TIMEOUT
from tests.npm_clients import environment, package_bin, run_script

FLIGHTS = search_flights("JFK", "LAX")
FIRST = FLIGHTS[0]  # the scripts pick the first flight offered and its first free seat
SEAT = seat_map_for(FIRST.id).first_free()
STOPPED_AT_PAYMENT = (
    "Tool 'book_flight' needs an answer on a web page (URL mode), and this client declared form "
    "mode. Declare the elicitation.url capability (URL mode needs protocol 2025-11-25 or later) "
    "to use this tool; the call was stopped."
)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("npm-home")


@pytest.fixture(scope="module")
def sdk_v1(server: str, home: Path) -> dict[str, Any]:
    return run_script("sdk-v1.mjs", "@modelcontextprotocol/sdk", f"{server}/mcp", home=home)


@pytest.fixture(scope="module")
def sdk_117(server: str, home: Path) -> dict[str, Any]:
    return run_script("sdk-v1.mjs", "sdk-1.17", f"{server}/mcp", home=home)


@pytest.fixture(scope="module")
def client_v2(server: str, home: Path) -> dict[str, Any]:
    return run_script("client-v2.mjs", f"{server}/mcp", home=home)


@pytest.fixture(scope="module")
def ext_tasks(server: str, home: Path) -> dict[str, Any]:
    return run_script("tasks.mjs", f"{server}/mcp", home=home)


def assert_booked(path: dict[str, Any]) -> None:
    """A ticket for the first flight and the seat the client chose."""
    assert "error" not in path, path
    assert path["isError"] is False, path["text"]
    booked = path["result"]
    assert booked["booked"] is True and booked["flight"] == FIRST.number
    assert booked["seat"] == SEAT
    assert booked["ticket"].startswith(f"CB-{FIRST.id.replace('-', '')}-{SEAT}-")


def assert_asked_flight_then_seat(path: dict[str, Any], *, paid: bool = True) -> None:
    """Flight, seat and review in forms, then (for a client that takes URL mode) the payment
    on its page; a form-only client is never sent the payment link."""
    flight, seat, review, *payment = path["questions"]
    assert review["mode"] == "form" and review["properties"] == ["confirm"]
    if paid:
        [pay] = payment
        assert pay["mode"] == "url" and pay["url"].startswith("http://127.0.0.1:")
        assert pay["page"]["status"] == 200 and "4242" in pay["page"]["text"]
    else:
        assert payment == []
    assert flight["mode"] == "form" and flight["context"] == ["flights"]
    assert flight["message"].startswith("Select your flight from JFK to LAX:")
    assert f"{FIRST.airline} {FIRST.number}" in flight["message"]
    assert flight["answer"] == {"flight_id": FIRST.id}
    assert (
        seat["context"] == ["seat_map"] and seat["message"] == f"Select your seat on {FIRST.number}"
    )


def assert_notified(path: dict[str, Any]) -> None:
    """The tool's log lines and its progress (the server's steps, with their total, in order)."""
    logged = [log["data"]["message"] for log in path["logs"] if log["logger"] == "chatbridge.tool"]
    assert logged == ["Searching flights", "Booked"]
    steps = [p for p in path["progress"] if p.get("total") == 4]
    assert [p["message"] for p in steps] == [
        "Found 5 flights",
        f"Selected {FIRST.number}",
        f"Seat {SEAT} held",
        "Ticket issued",
    ]
    assert [p["progress"] for p in steps] == [1, 2, 3, 4]


def assert_respond_path(path: dict[str, Any]) -> None:
    """A client that cannot elicit answers the request notifications with `_respond`, and
    pays on the page whose link the payment's request carries."""
    assert_booked(path)
    assert [q["type"] for q in path["questions"]] == [
        "pick_flight",
        "pick_seat",
        "review",
        "payment",
    ]
    assert path["questions"][-1] == {"type": "payment", "mode": "url", "page": 200}
    assert [a["result"]["ok"] for a in path["answers"]] == [True, True, True]


def assert_stopped_at_payment(path: dict[str, Any]) -> None:
    """A form-only client books up to the payment, then gets the error naming URL mode."""
    assert path["isError"] is True and path["text"] == [STOPPED_AT_PAYMENT]
    assert_asked_flight_then_seat(path, paid=False)


def assert_errors_readable(errors: dict[str, Any]) -> None:
    unknown = errors["unknownRequest"]
    assert unknown["code"] == -32602
    assert "No open request 'req_nope': unknown, answered or timed out." in unknown["message"]


# --- the TypeScript SDK v1, 1.32.2 (protocol 2025-11-25) ----------------------------------


def test_sdk_1_32_with_forms_only_is_never_sent_the_payment_link(sdk_v1: dict[str, Any]) -> None:
    form = sdk_v1["form"]
    assert form["protocolVersion"] == "2025-11-25"
    assert_stopped_at_payment(form)
    # Its zod schemas strip x-model-context from requestedSchema: every form question carries
    # its context in the message's boundary section too (DESIGN §4), and the client read it
    # there (the flight and seat questions found their context); the human part is the text.
    assert not any(q["schemaHasContext"] for q in form["questions"])
    asked = [q for q in form["questions"] if q["mode"] == "form"]
    assert asked and all(q["messageHasContext"] for q in asked)
    assert all(q["contextFrom"] == "message" for q in asked)
    assert "x-model-context" not in form["questions"][1]["message"]


def test_sdk_1_32_books_and_pays_when_it_takes_url_mode_too(sdk_v1: dict[str, Any]) -> None:
    both = sdk_v1["formAndUrl"]
    assert_booked(both)
    assert_asked_flight_then_seat(both)
    assert_notified(both)
    assert both["result"]["paid"] == {"last4": "4242"}
    assert len(both["completed"]) == 1  # notifications/elicitation/complete for the payment


def test_sdk_1_32_books_through_respond_when_it_cannot_elicit(sdk_v1: dict[str, Any]) -> None:
    assert sdk_v1["respond"]["protocolVersion"] == "2025-11-25"
    assert_respond_path(sdk_v1["respond"])


def test_sdk_1_32_sends_feedback_with_every_kind_of_field(sdk_v1: dict[str, Any]) -> None:
    feedback = sdk_v1["feedback"]
    assert feedback["isError"] is False, feedback["text"]
    assert feedback["result"]["received"] is True
    assert feedback["result"]["areas"] == ["chat"]  # a multi-select, allowed on 2025-11-25
    approval, form = feedback["questions"]
    assert approval["message"].startswith("Allow the tool 'send_feedback' to run")


def test_sdk_1_32_reads_errors_a_user_understands(sdk_v1: dict[str, Any]) -> None:
    assert_errors_readable(sdk_v1["errors"])
    bad = sdk_v1["errors"]["badArguments"]
    assert bad["isError"] is True
    assert bad["text"] == [
        "Invalid arguments for tool 'book_flight': origin: String should have at least 2 "
        "characters. Call it again with arguments matching its parameters schema."
    ]


def test_sdk_1_32_gets_resource_not_found_for_unknown_resources(sdk_v1: dict[str, Any]) -> None:
    """2025-11-25 and before: -32002 (SEP-2164 moves 2026-07-28 to -32602)."""
    assert sdk_v1["errors"]["unknownResource"]["code"] == -32002


def test_sdk_1_32_sets_the_log_level(sdk_v1: dict[str, Any]) -> None:
    assert sdk_v1["form"]["logLevel"] == "ok"


# --- the TypeScript SDK v1, 1.17.5 (protocol 2025-06-18) ----------------------------------


def test_sdk_1_17_books_up_to_the_payment_it_cannot_take(sdk_117: dict[str, Any]) -> None:
    form = sdk_117["form"]
    assert form["protocolVersion"] == "2025-06-18"  # no URL mode in that version
    assert_stopped_at_payment(form)


def test_sdk_1_17_declaring_url_mode_only_is_read_as_a_url_only_client(
    server: str, home: Path
) -> None:
    # 2025-06-18 itself knows only `elicitation: {}`; `{url: {}}` still says what the client
    # takes: book_flight's first question is a form, which it did not declare.
    run = run_script("sdk-v1.mjs", "sdk-1.17", f"{server}/mcp", "urlOnly", home=home)
    url_only = run["urlOnly"]
    assert url_only["protocolVersion"] == "2025-06-18"
    assert url_only["isError"] is True and url_only["questions"] == []
    assert url_only["text"] == [
        "Tool 'book_flight' needs an answer in a form (form mode), and this client declared url "
        "mode. Declare the elicitation.form capability to use this tool; the call was stopped."
    ]


def test_sdk_1_17_books_through_respond_when_it_cannot_elicit(sdk_117: dict[str, Any]) -> None:
    assert_respond_path(sdk_117["respond"])
    assert_errors_readable(sdk_117["errors"])


def test_sdk_1_17_sends_feedback(sdk_117: dict[str, Any]) -> None:
    feedback = sdk_117["feedback"]
    assert feedback["isError"] is False, feedback["text"]
    assert feedback["result"]["received"] is True


# --- the TypeScript v2 client, 2.4.0 --------------------------------------------------------


def test_client_v2_books_over_2026_07_28_input_required_rounds(client_v2: dict[str, Any]) -> None:
    mrtr = client_v2["mrtr"]
    assert mrtr["protocolVersion"] == "2026-07-28"
    assert_booked(mrtr)
    assert_asked_flight_then_seat(mrtr)
    assert_notified(mrtr)  # logs because the call opted in with _meta logLevel


def test_client_v2_books_with_pushed_forms_on_the_legacy_protocol(
    client_v2: dict[str, Any],
) -> None:
    form = client_v2["form"]
    assert form["protocolVersion"] == "2025-11-25"
    assert_booked(form)
    assert_asked_flight_then_seat(form)
    forms = [q for q in form["questions"] if q["mode"] == "form"]
    assert len(forms) == 3 and all(q["schemaHasContext"] for q in forms)  # v2 keeps them
    assert_notified(form)


def test_client_v2_reads_errors_a_user_understands(client_v2: dict[str, Any]) -> None:
    assert_errors_readable(client_v2["errors"])
    assert client_v2["errors"]["unknownResource"]["message"] == "No resource 'ui://no-such-page'."


def test_client_v2_gets_invalid_params_with_the_uri_for_unknown_resources(
    client_v2: dict[str, Any],
) -> None:
    """2026-07-28 (SEP-2164): -32602 with the requested URI in the error's data."""
    unknown = client_v2["errors"]["unknownResource"]
    assert unknown["code"] == -32602
    assert unknown["data"]["uri"] == "ui://no-such-page"


# --- the Tasks client, ext-tasks 0.2.2 on the v2 client 2.4.0 (2026-07-28) -----------------


def recorded(database: Path, call_id: str) -> tuple[str, str, str]:
    """(status, transport, aborted_by) of a call's ToolSession row."""
    with sqlite3.connect(database) as db:
        row = db.execute(
            "SELECT status, transport, aborted_by FROM chatbridge_chat_toolsession WHERE id = ?",
            (call_id,),
        ).fetchone()
    assert row is not None, f"no ToolSession {call_id}"
    return row


def test_ext_tasks_books_a_flight_through_a_task(
    ext_tasks: dict[str, Any], server: str, server_database: Path
) -> None:
    """The call becomes a task; each question comes in a tasks/get and is answered by
    tasks/update (a URL question too: its page is completed first); the task completes with
    the ticket."""
    book = ext_tasks["book"]
    assert "error" not in book, book
    assert book["protocolVersion"] == "2026-07-28"
    assert book["capabilities"]["execution"] and book["capabilities"]["cancellation"]
    assert book["kind"] == "task" and book["status"] == "completed"
    assert_booked(book)
    flight, seat = book["questions"][:2]
    assert flight["context"] == ["flights"] and flight["answer"] == {"flight_id": FIRST.id}
    assert (
        seat["context"] == ["seat_map"] and seat["message"] == f"Select your seat on {FIRST.number}"
    )
    forms = [q for q in book["questions"] if q["mode"] == "form"]
    assert all(q["schemaHasContext"] and q["messageHasContext"] for q in forms)
    # Flight, seat and review in forms, then the payment: its page on this server, paid by
    # test card.
    assert [q["mode"] for q in book["questions"]] == ["form", "form", "form", "url"]
    payment = book["questions"][-1]
    assert payment["url"].startswith(f"{server}/") and payment["page"]["status"] == 200
    assert book["result"]["paid"] == {"last4": "4242"}
    assert book["errors"] == []

    # The statuses seen, in order: input_required once per question (with its key), then
    # completed; working only while the server has not asked yet.
    statuses = [event["status"] for event in book["events"]]
    assert statuses[0] == "input_required" and statuses[-1] == "completed"
    assert set(statuses[:-1]) <= {"working", "input_required"}
    keys = [event["inputKeys"] for event in book["events"] if "inputKeys" in event]
    asked = [k for i, k in enumerate(keys) if i == 0 or k != keys[i - 1]]
    assert asked == [[q["inputKey"]] for q in book["questions"]]

    # On the wire: the call returns a task handle, each answer is one tasks/update naming
    # exactly the open question's key, the last tasks/get carries the result.
    wire = book["wire"]
    assert wire[0] == {"method": "tools/call", "resultType": "task", "status": "input_required"}
    updates = [w["answered"] for w in wire if w["method"] == "tasks/update"]
    assert updates == [[q["inputKey"]] for q in book["questions"]]
    assert wire[-1] == {"method": "tasks/get", "resultType": "complete", "status": "completed"}
    assert recorded(server_database, book["taskId"])[:2] == ("completed", "mcp-task")


def test_ext_tasks_cancels_a_task(ext_tasks: dict[str, Any], server_database: Path) -> None:
    """Cancelled at its first question: the client reports it cancelled, the server still
    does when asked again, and the call's ToolSession is aborted by the client."""
    cancel = ext_tasks["cancel"]
    assert "error" not in cancel, cancel
    assert cancel["kind"] == "task" and cancel["status"] == "cancelled"
    assert cancel["thrown"] == "TaskCancelledError"
    assert [q["message"] for q in cancel["questions"]] == ["Select your flight from JFK to LAX:"]
    methods = [w["method"] for w in cancel["wire"]]
    assert methods.count("tasks/cancel") == 1 and "tasks/update" not in methods
    assert cancel["wire"][-1] == {
        "method": "tasks/get",
        "resultType": "complete",
        "status": "cancelled",
    }
    assert cancel["after"] == {
        "status": "cancelled",
        "statusMessage": "The tool call was aborted: cancelled by the MCP client",
    }
    assert recorded(server_database, cancel["taskId"]) == ("aborted", "mcp-task", "mcp-client")


# --- the MCP Inspector CLI, 2.12.0 ----------------------------------------------------------


def inspector(home: Path, *calls: list[str], timeout: float = 60) -> list[dict[str, Any]]:
    """Run the Inspector CLI once per call, all at once (each is a node process that mostly
    waits). Each prints one JSON object on stdout (`--format json`), or an error envelope as the
    last line of stderr; the exit code is added as ``rc``."""
    command = package_bin("@modelcontextprotocol/inspector", "clients/cli/build/index.js")
    running = [
        subprocess.Popen(
            [*command, *args, "--format", "json"],
            env=environment(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in calls
    ]
    results = []
    try:
        for proc in running:
            stdout, stderr = proc.communicate(timeout=timeout)
            out = stdout.strip() or stderr.strip().rpartition("\n")[2]
            assert out.startswith("{"), f"the Inspector printed no JSON:\n{stdout}\n{stderr}"
            results.append({"rc": proc.returncode, **json.loads(out)})
    finally:  # one failing leaves no other running (nor its pipes open) for a later test
        for proc in running:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    return results


def test_inspector_lists_and_reads_what_the_server_offers(server: str, home: Path) -> None:
    url = f"{server}/mcp"
    listed, modern, resources, read = inspector(
        home,
        [url, "--method", "tools/list"],
        [url, "--protocol-era", "modern", "--method", "tools/list"],
        [url, "--method", "resources/list"],
        [url, "--method", "resources/read", "--uri", "ui://color-picker"],
    )
    assert [listed["rc"], modern["rc"], resources["rc"], read["rc"]] == [0, 0, 0, 0]
    tools = {tool["name"] for tool in listed["result"]["tools"]}
    # The Inspector negotiates no MCP Apps: the MCP App's own tools (visibility "app") are not
    # listed to it (ext-apps graceful degradation; tests/test_mcp.py lists them to a host).
    assert tools == {"book_flight", "pick_card", "send_feedback", "choose_color", "_respond"}
    assert {tool["name"] for tool in modern["result"]["tools"]} == tools
    assert [(r["uri"], r["mimeType"]) for r in resources["result"]["resources"]] == [
        ("ui://color-picker", "text/html;profile=mcp-app")
    ]
    [page] = read["result"]["contents"]
    assert page["mimeType"] == "text/html;profile=mcp-app" and "<html" in page["text"].lower()


def test_inspector_reads_a_respond_error_and_a_booking_it_cannot_answer(
    server: str, home: Path, tmp_path: Path
) -> None:
    """The Inspector CLI cannot answer questions: declared without elicitation, its booking
    ends after the server's answer timeout with a result saying so, not a hang."""
    config = tmp_path / "inspector.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "chatbridge": {
                        "type": "streamable-http",
                        "url": f"{server}/mcp",
                        "elicitCapability": "off",
                    }
                }
            }
        )
    )
    target = ["--config", str(config), "--server", "chatbridge"]
    respond = ["--tool-name", "_respond", "--tool-args-json", '{"request_id": "req_nope"}']
    book = ["--tool-name", "book_flight", "--tool-arg", "origin=JFK", "destination=LAX"]
    error, booking = inspector(
        home,
        [*target, "--method", "tools/call", *respond],
        [*target, "--method", "tools/call", *book],
        timeout=MCP_REQUEST_TIMEOUT + 30,
    )
    assert error["rc"] != 0
    assert error["error"]["message"] == (
        "No open request 'req_nope': unknown, answered or timed out."
    )
    assert booking["rc"] == 0
    assert booking["result"]["structuredContent"] == {
        "booked": False,
        "reason": "flight selection cancelled",
    }


def test_inspector_sets_the_log_level(server: str, home: Path) -> None:
    [answer] = inspector(
        home, [f"{server}/mcp", "--method", "logging/setLevel", "--log-level", "debug"]
    )
    assert answer["rc"] == 0, answer
