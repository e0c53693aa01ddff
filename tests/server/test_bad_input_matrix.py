"""Bad input over every route that takes it, REST and MCP: a 4xx naming the field, never a
5xx, and nothing stored.

Each case takes a valid request and spoils one part of it: a NUL character or a lone
surrogate in a string (content, metadata keys and values, state, tool arguments, custom-type
input, queries), a timestamp that leaves the calendar once converted to UTC, JSON nested
deeper than the limit, a number no store holds, and integers of 2**63 for every limit,
offset and top_k. Bodies are sent as raw JSON, the way any client could send them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from fastapi.testclient import TestClient

from memmachine_sdk.models import MAX_JSON_DEPTH, MAX_OFFSET
from memmachine_server.app import create_app
from tests.server.conftest import make_settings
from tests.server.test_mcp_http import BASE, KEY_A, mcp_client
from tests.server.test_mcp_http import app as app

USER = "bad-input-user"
HUGE = 2**63
NUL = "a\x00b"
SURROGATE = "a\ud800b"


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


#: One valid request per route that takes a body: (method, path, body).
VALID: dict[str, tuple[str, str, dict[str, Any]]] = {
    "add": (
        "POST",
        "/v1/memories",
        {
            "user_id": USER,
            "session_id": "s",
            "messages": [{"content": "hello", "producer": "Ana", "metadata": {"k": "v"}}],
        },
    ),
    "search": ("POST", "/v1/memories/search", {"user_id": USER, "query": "hello", "top_k": 5}),
    "profile": (
        "POST",
        "/v1/profile",
        {"user_id": USER, "facts": [{"tag": "t", "feature": "f", "value": "v", "metadata": {}}]},
    ),
    "profile-search": ("POST", "/v1/profile/search", {"user_id": USER, "query": "q", "top_k": 3}),
    "invalidate": (
        "POST",
        "/v1/profile/facts/00000000-0000-0000-0000-000000000000/invalidate",
        {"user_id": USER, "reason": "changed"},
    ),
    "working-put": (
        "PUT",
        "/v1/sessions/s/working",
        {
            "user_id": USER,
            "state": {"step": "one"},
            "summary": "so far",
            "messages": [{"content": "hi"}],
        },
    ),
    "working-append": (
        "POST",
        "/v1/sessions/s/working/messages",
        {"user_id": USER, "messages": [{"content": "hi", "metadata": {"k": "v"}}]},
    ),
    "prompt": ("POST", "/v1/memory-prompt", {"user_id": USER, "query": "hello", "top_k": 5}),
    "tool": (
        "POST",
        "/v1/tools/execute",
        {
            "user_id": USER,
            "session_id": "s",
            "tool_call": {
                "id": "call_1",
                "function": {"name": "remember", "arguments": '{"content": "hello"}'},
            },
        },
    ),
    "custom-store": (
        "POST",
        "/v1/memory-types/reading_list/store",
        {"user_id": USER, "input": {"title": "Dune", "note": "classic"}},
    ),
    "custom-retrieve": (
        "POST",
        "/v1/memory-types/reading_list/retrieve",
        {"user_id": USER, "input": {"text": "dune"}},
    ),
}


def spoiled(route: str, path: list[str | int], value: Any) -> tuple[str, str, dict[str, Any]]:
    """The valid request of ``route`` with the part at ``path`` replaced by ``value``."""
    method, url, body = VALID[route]
    body = copy.deepcopy(body)
    target: Any = body
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return method, url, body


def tool_arguments(arguments: dict[str, Any]) -> Any:
    return json.dumps(arguments)  # JSON in a string, escapes and all


#: (id, route, path to spoil, bad value, the field the error must name)
CASES: list[tuple[str, str, list[str | int], Any, str]] = []
for bad_name, bad in (("nul", NUL), ("surrogate", SURROGATE)):
    CASES += [
        (f"add-content-{bad_name}", "add", ["messages", 0, "content"], bad, "messages.0.content"),
        (
            f"add-producer-{bad_name}",
            "add",
            ["messages", 0, "producer"],
            bad,
            "messages.0.producer",
        ),
        (
            f"add-metadata-value-{bad_name}",
            "add",
            ["messages", 0, "metadata"],
            {"k": bad},
            "messages.0.metadata",
        ),
        (
            f"add-metadata-key-{bad_name}",
            "add",
            ["messages", 0, "metadata"],
            {bad: "v"},
            "messages.0.metadata",
        ),
        (f"search-query-{bad_name}", "search", ["query"], bad, "query"),
        (f"profile-value-{bad_name}", "profile", ["facts", 0, "value"], bad, "facts.0.value"),
        (f"profile-tag-{bad_name}", "profile", ["facts", 0, "tag"], bad, "facts.0.tag"),
        (
            f"profile-metadata-key-{bad_name}",
            "profile",
            ["facts", 0, "metadata"],
            {bad: 1},
            "facts.0.metadata",
        ),
        (f"profile-search-{bad_name}", "profile-search", ["query"], bad, "query"),
        (f"invalidate-reason-{bad_name}", "invalidate", ["reason"], bad, "reason"),
        (f"state-value-{bad_name}", "working-put", ["state"], {"k": [bad]}, "state"),
        (f"state-key-{bad_name}", "working-put", ["state"], {bad: 1}, "state"),
        (f"summary-{bad_name}", "working-put", ["summary"], bad, "summary"),
        (
            f"append-content-{bad_name}",
            "working-append",
            ["messages", 0, "content"],
            bad,
            "messages.0.content",
        ),
        (f"prompt-query-{bad_name}", "prompt", ["query"], bad, "query"),
        (
            f"tool-arguments-{bad_name}",
            "tool",
            ["tool_call", "function", "arguments"],
            tool_arguments({"content": bad}),
            "tool_call.function.arguments",
        ),
        (f"custom-input-{bad_name}", "custom-store", ["input", "note"], bad, "input"),
        (f"custom-query-{bad_name}", "custom-retrieve", ["input", "text"], bad, "input"),
    ]
CASES += [
    (
        "timestamp-before-year-1-in-utc",
        "add",
        ["messages", 0, "timestamp"],
        "0001-01-01T00:00:00+01:00",
        "messages.0.timestamp",
    ),
    (
        "timestamp-after-year-9999-in-utc",
        "add",
        ["messages", 0, "timestamp"],
        "9999-12-31T23:59:59-01:00",
        "messages.0.timestamp",
    ),
    (
        "working-timestamp-after-year-9999",
        "working-append",
        ["messages", 0, "timestamp"],
        "9999-12-31T23:30:00-05:00",
        "messages.0.timestamp",
    ),
    (
        "metadata-too-deep",
        "add",
        ["messages", 0, "metadata"],
        nested(MAX_JSON_DEPTH + 1),
        "messages.0.metadata",
    ),
    ("state-too-deep", "working-put", ["state"], nested(MAX_JSON_DEPTH + 1), "state"),
    (
        "tool-arguments-too-deep",
        "tool",
        ["tool_call", "function", "arguments"],
        tool_arguments({"content": "x", "metadata": nested(MAX_JSON_DEPTH + 1)}),
        "tool_call.function.arguments",
    ),
    (
        "tool-arguments-deeper-than-python",
        "tool",
        ["tool_call", "function", "arguments"],
        '{"content": "x", "metadata": ' + '{"a": ' * 5000 + "1" + "}" * 5001,
        "tool_call.function.arguments",
    ),
    ("custom-input-too-deep", "custom-store", ["input"], nested(MAX_JSON_DEPTH + 1), "input"),
    (
        "metadata-integer-over-64-bits",
        "add",
        ["messages", 0, "metadata"],
        {"n": HUGE * 10},
        "messages.0.metadata",
    ),
    ("state-not-a-number", "working-put", ["state"], {"n": float("nan")}, "state"),
    ("search-top-k-2-63", "search", ["top_k"], HUGE, "top_k"),
    ("profile-search-top-k-2-63", "profile-search", ["top_k"], HUGE, "top_k"),
    ("prompt-top-k-2-63", "prompt", ["top_k"], HUGE, "top_k"),
    (
        "working-expected-version-2-64",
        "working-put",
        ["expected_version"],
        2 * HUGE,
        "expected_version",
    ),
]

#: (id, GET path, query parameters, the field the error must name)
QUERY_CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("list-offset-2-63", "/v1/memories", {"offset": HUGE}, "offset"),
    ("list-offset-2-63-minus-1", "/v1/memories", {"offset": HUGE - 1}, "offset"),
    ("list-limit-2-63", "/v1/memories", {"limit": HUGE}, "limit"),
    ("profile-offset-2-63", "/v1/profile", {"offset": HUGE}, "offset"),
    ("profile-limit-2-63", "/v1/profile", {"limit": HUGE}, "limit"),
    ("working-offset-2-63", "/v1/sessions/s/working", {"offset": HUGE}, "offset"),
    ("working-limit-2-63", "/v1/sessions/s/working", {"limit": HUGE}, "limit"),
    ("working-last-n-2-63", "/v1/sessions/s/working", {"last_n": HUGE}, "last_n"),
    ("jobs-limit-2-63", "/v1/jobs", {"limit": HUGE}, "limit"),
    ("history-tag-nul", "/v1/profile/history", {"tag": NUL, "feature": "f"}, "tag"),
    ("profile-tag-nul", "/v1/profile", {"tag": NUL}, "tag"),
    ("episode-id-nul", "/v1/memories/a%00b", {}, "path"),
    ("fact-id-nul", "/v1/profile/facts/a%00b", {}, "path"),
    ("job-id-nul", "/v1/jobs/a%00b", {}, "path"),
]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(
        tmp_path_factory.mktemp("bad-input"),
        memory_types=["examples.custom_memory_type:ReadingList"],
    )
    client = TestClient(
        create_app(settings), raise_server_exceptions=False, base_url="http://localhost"
    )
    with client:
        yield client


def send(api: TestClient, method: str, url: str, body: dict[str, Any]) -> Any:
    # json.dumps writes NaN and escapes NUL and surrogates (\u0000, \ud800) as JSON allows
    raw = json.dumps(body).encode()
    return api.request(method, url, content=raw, headers={"content-type": "application/json"})


def assert_refused(response: Any, field: str) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert "Traceback" not in response.text
    error = response.json()["error"]
    assert error["field"] == field, error
    assert error["code"] == "invalid_input"


def test_every_valid_request_is_accepted(api: TestClient) -> None:
    """The baseline: each request is fine before it is spoiled (so a refusal below is the
    spoiled part's)."""
    for route, (method, url, body) in VALID.items():
        if route == "invalidate":
            continue  # no such fact: 404
        response = send(api, method, url, {**body, "user_id": f"{USER}-valid"})
        assert response.status_code < 300, (route, response.text)


@pytest.mark.parametrize(
    ("route", "path", "value", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_spoiled_body_is_refused_naming_the_field(
    api: TestClient, route: str, path: list[str | int], value: Any, field: str
) -> None:
    assert_refused(send(api, *spoiled(route, path, value)), field)


@pytest.mark.parametrize(
    ("url", "params", "field"), [c[1:] for c in QUERY_CASES], ids=[c[0] for c in QUERY_CASES]
)
def test_a_spoiled_query_is_refused_naming_the_field(
    api: TestClient, url: str, params: dict[str, Any], field: str
) -> None:
    assert_refused(api.get(url, params={"user_id": USER, **params}), field)


def test_nothing_of_the_refused_requests_was_stored(api: TestClient) -> None:
    for method, url, _ in (VALID["add"], VALID["profile"], VALID["working-put"]):
        for _, route, path, value, _ in CASES:
            if VALID[route][1] == url:
                send(api, method, url, spoiled(route, path, value)[2])
    assert api.get("/v1/memories", params={"user_id": USER}).json()["total"] == 0
    assert api.get("/v1/profile", params={"user_id": USER}).json()["facts"] == []
    working = api.get("/v1/sessions/s/working", params={"user_id": USER}).json()
    assert working["version"] == 0


def test_timestamps_at_the_edges_of_the_calendar_are_kept_and_read_back(api: TestClient) -> None:
    user = "calendar-edge"
    edges = ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z", "0001-01-01T01:00:00+01:00"]
    messages = [{"content": f"said at {edge}", "timestamp": edge} for edge in edges]
    added = send(
        api, "POST", "/v1/memories", {"user_id": user, "session_id": "s", "messages": messages}
    )
    assert added.status_code == 201, added.text
    listed = api.get("/v1/memories", params={"user_id": user})
    assert listed.status_code == 200
    assert sorted(e["timestamp"][:4] for e in listed.json()["episodes"]) == ["0001", "0001", "9999"]
    for method, url, body in (
        ("POST", "/v1/memories/search", {"user_id": user, "query": "said"}),
        ("POST", "/v1/memory-prompt", {"user_id": user, "session_id": "s", "query": "said"}),
    ):
        assert send(api, method, url, body).status_code == 200
    assert api.get("/v1/sessions/s/working", params={"user_id": user}).status_code == 200


def test_an_offset_past_the_end_is_an_empty_page(api: TestClient) -> None:
    user = "paging-user"
    body = {
        "user_id": user,
        "session_id": "s",
        "messages": [{"content": "one"}, {"content": "two"}],
    }
    assert send(api, "POST", "/v1/memories", body).status_code == 201
    for offset in (2, 10**9, MAX_OFFSET):
        page = api.get("/v1/memories", params={"user_id": user, "offset": offset})
        assert page.status_code == 200, page.text
        assert page.json()["episodes"] == []
        assert page.json()["total"] == 2
    page = api.get("/v1/profile", params={"user_id": user, "offset": MAX_OFFSET})
    assert (page.status_code, page.json()["facts"]) == (200, [])
    page = api.get("/v1/sessions/s/working", params={"user_id": user, "offset": MAX_OFFSET})
    assert (page.status_code, page.json()["messages"]) == (200, [])


# ----------------------------------------------------------------------------- MCP tools

#: (id, tool, arguments, the argument the error must name)
MCP_CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("add-content-nul", "add_memory", {"content": NUL}, "content"),
    ("add-content-surrogate", "add_memory", {"content": SURROGATE}, "content"),
    (
        "add-metadata-key-nul",
        "add_memory",
        {"messages": [{"content": "x", "metadata": {NUL: 1}}]},
        "metadata",
    ),
    (
        "add-attachment-over-mcp",
        "add_memory",
        {"messages": [{"content": "x", "attachments": [{"data_uri": "data:,x", "caption": "c"}]}]},
        "attachments",
    ),
    ("search-query-nul", "search_memory", {"query": NUL}, "query"),
    ("search-top-k-2-63", "search_memory", {"query": "q", "top_k": HUGE}, "top_k"),
    ("state-nul", "set_state", {"state": {"k": NUL}}, "state"),
    ("state-too-deep", "set_state", {"state": nested(MAX_JSON_DEPTH + 1)}, "state"),
    ("summary-surrogate", "set_state", {"summary": SURROGATE}, "summary"),
    ("profile-offset-2-63", "get_profile", {"offset": HUGE}, "offset"),
    (
        "profile-value-nul",
        "set_profile",
        {"facts": [{"tag": "t", "feature": "f", "value": NUL}]},
        "value",
    ),
    ("prompt-query-nul", "memory_prompt", {"query": NUL}, "query"),
    ("prompt-top-k-2-63", "memory_prompt", {"query": "q", "top_k": HUGE}, "top_k"),
    (
        "expected-version-2-64",
        "set_state",
        {"state": {}, "expected_version": 2 * HUGE},
        "expected_version",
    ),
]


async def raw_tool_call(app: Any, tool: str, arguments: dict[str, Any]) -> httpx2.Response:
    """One ``tools/call`` posted as raw JSON-RPC, escapes and all (an MCP client library
    would refuse to encode a lone surrogate)."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE) as http:
        return await http.post(
            "/mcp",
            content=json.dumps(message).encode(),
            headers={
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "authorization": f"Bearer {KEY_A}",
            },
        )


@pytest.mark.parametrize(
    ("tool", "arguments", "field"), [c[1:] for c in MCP_CASES], ids=[c[0] for c in MCP_CASES]
)
async def test_a_spoiled_tool_call_is_refused_naming_the_argument(
    app: Any, tool: str, arguments: dict[str, Any], field: str
) -> None:
    ids = {"user_id": "mcp-bad-input", "session_id": "s"}
    response = await raw_tool_call(app, tool, {**ids, **arguments})
    assert "Traceback" not in response.text
    if response.status_code == 400:
        # The MCP SDK's JSON parser refuses a lone surrogate escape before any tool runs:
        # a JSON-RPC parse error, which cannot name the argument.
        assert response.json()["error"]["code"] == -32700
        assert "\\ud800" in json.dumps(arguments)
    else:
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        assert result["isError"] is True, result
        text = result["content"][0]["text"]
        assert field in text
        assert "internal error" not in text.lower()
    async with mcp_client(app) as session:
        listed = await session.call_tool("get_profile", {"user_id": "mcp-bad-input"})
        state = await session.call_tool(
            "get_state", {"user_id": "mcp-bad-input", "session_id": "s"}
        )
    assert listed.structured_content is not None
    assert listed.structured_content["facts"] == []
    assert state.structured_content is not None
    assert state.structured_content["version"] == 0
