"""Memory as tools: GET /v1/tools, POST /v1/tools/execute, and the SDK over them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memmachine import memory_tools
from memmachine_sdk import MemMachineClient
from memmachine_sdk.errors import BadRequestError
from tests.server.conftest import LOCAL

JSON_TYPES = {"string", "integer", "number", "boolean", "object", "array", "null"}


def check_strict_schema(schema: dict[str, Any], where: str) -> None:
    """A JSON schema OpenAI accepts in strict mode: known types only, and every object
    closed with all of its properties required."""
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    assert set(kinds) <= JSON_TYPES, where
    assert isinstance(schema.get("description", ""), str), where
    if "enum" in schema:
        assert schema["enum"], where
    if "object" in kinds:
        assert schema["additionalProperties"] is False, where
        assert sorted(schema["required"]) == sorted(schema["properties"]), where
        for name, inner in schema["properties"].items():
            check_strict_schema(inner, f"{where}.{name}")


def call(name: str, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def execute(api: TestClient, user: str, tool_call: dict[str, Any], **ids: str) -> Any:
    response = api.post("/v1/tools/execute", json={"user_id": user, "tool_call": tool_call, **ids})
    assert response.status_code == 200, response.text
    message = response.json()
    assert message["role"] == "tool"
    assert message["tool_call_id"] == tool_call["id"]
    return json.loads(message["content"])


def test_tool_definitions_are_strict_openai_functions(api: TestClient) -> None:
    response = api.get("/v1/tools")
    assert response.status_code == 200
    tools = response.json()["tools"]
    assert tools == memory_tools()
    assert [tool["function"]["name"] for tool in tools] == ["remember", "recall", "forget"]
    for tool in tools:
        assert tool["type"] == "function"
        function = tool["function"]
        assert set(function) == {"name", "description", "parameters", "strict"}
        assert function["strict"] is True
        assert function["description"]
        assert function["parameters"]["type"] == "object"
        check_strict_schema(function["parameters"], function["name"])
    params = {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools}
    assert params["remember"]["properties"]["session_id"]["type"] == ["string", "null"]
    assert params["recall"]["properties"]["top_k"]["type"] == ["integer", "null"]
    # forget's scope must be chosen explicitly, and the description says what it destroys
    assert params["forget"]["properties"]["scope"] == {
        "type": "string",
        "enum": ["session", "user"],
        "description": params["forget"]["properties"]["scope"]["description"],
    }
    forget = tools[2]["function"]["description"]
    assert "only destructive" in forget
    assert "explicitly" in forget


def test_remember_recall_forget_round_trip(api: TestClient) -> None:
    user = "tool-ana"
    stored = execute(
        api,
        user,
        call("remember", {"content": "Ana is allergic to shellfish", "session_id": None}),
        session_id="dinner",
    )
    assert stored["stored"] is True
    assert stored["session_id"] == "dinner"
    episode = api.get(f"/v1/memories/{stored['episode_id']}", params={"user_id": user}).json()
    assert episode["content"] == "Ana is allergic to shellfish"
    assert episode["session_id"] == "dinner"

    execute(
        api, "tool-bob", call("remember", {"content": "Bob eats shellfish daily"}), session_id="x"
    )
    found = execute(api, user, call("recall", {"query": "shellfish allergy", "top_k": None}))
    assert [hit["content"] for hit in found["episodes"]] == ["Ana is allergic to shellfish"]
    assert found["episodes"][0]["id"] == stored["episode_id"]

    gone = execute(api, user, call("forget", {"scope": "session", "session_id": "dinner"}))
    assert gone["forgotten"] == "session"
    assert gone["episodes_deleted"] == 1
    assert execute(api, user, call("recall", {"query": "shellfish", "top_k": 3}))["episodes"] == []
    assert (
        api.get(f"/v1/memories/{stored['episode_id']}", params={"user_id": user}).status_code == 404
    )


def test_forget_user_removes_everything_for_that_user_only(api: TestClient) -> None:
    for user in ("tool-cy", "tool-dee"):
        execute(api, user, call("remember", {"content": f"{user} likes jazz", "session_id": "a"}))
        execute(api, user, call("remember", {"content": f"{user} plays sax", "session_id": "b"}))
    report = execute(api, "tool-cy", call("forget", {"scope": "user", "session_id": None}))
    assert (report["forgotten"], report["episodes_deleted"]) == ("user", 2)
    assert api.get("/v1/memories", params={"user_id": "tool-cy"}).json()["total"] == 0
    assert api.get("/v1/memories", params={"user_id": "tool-dee"}).json()["total"] == 2


@pytest.mark.parametrize(
    ("tool_call", "field"),
    [
        (call("recall", "{not json"), "tool_call.function.arguments"),
        (call("recall", "[1, 2]"), "tool_call.function.arguments"),
        (call("recall", {"query": "x", "top_k": "five"}), "tool_call.function.arguments.top_k"),
        (call("recall", {"query": "x", "top_k": 0}), "tool_call.function.arguments.top_k"),
        (call("recall", {"top_k": 3}), "tool_call.function.arguments.query"),
        (call("recall", {"query": "x", "extra": 1}), "tool_call.function.arguments.extra"),
        (call("remember", {"content": 42}), "tool_call.function.arguments.content"),
        (
            call("remember", {"content": "no session anywhere"}),
            "tool_call.function.arguments.session_id",
        ),
        (call("forget", {"session_id": "s"}), "tool_call.function.arguments.scope"),
        (call("forget", {"scope": "everything"}), "tool_call.function.arguments.scope"),
        (call("launch_rockets", {}), "tool_call.function.name"),
        ({"id": "c", "type": "function"}, "tool_call.function"),
    ],
)
def test_malformed_tool_calls_are_422_naming_the_field(
    api: TestClient, tool_call: dict[str, Any], field: str
) -> None:
    response = api.post("/v1/tools/execute", json={"user_id": "tool-bad", "tool_call": tool_call})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


def test_sdk_memory_prompt_tools_and_execute(api: TestClient) -> None:
    # The TestClient speaks the httpx Client interface the SDK uses, against the real app.
    http: Any = api
    with MemMachineClient(LOCAL, user_id="tool-sdk", http_client=http) as client:
        tools = client.tools()
        assert [tool["function"]["name"] for tool in tools] == ["remember", "recall", "forget"]
        message = client.execute_tool(
            call("remember", {"content": "Prefers window seats on trains", "session_id": "t"})
        )
        assert message["role"] == "tool"
        assert json.loads(message["content"])["stored"] is True
        client.append_working("t", ["Book me a train to Braga"])
        prompt = client.memory_prompt(
            "Which seat should I book on the train?", session_id="t", format="gemini"
        )
        assert prompt.format == "gemini"
        assert "Prefers window seats on trains" in prompt.system
        # the recent message and the new one form one user turn, as Gemini expects
        assert prompt.messages == [
            {
                "role": "user",
                "parts": [
                    {"text": "Book me a train to Braga\n\nWhich seat should I book on the train?"}
                ],
            }
        ]
        assert prompt.token_count <= prompt.max_tokens
        with pytest.raises(BadRequestError) as bad:
            client.memory_prompt("x", format="cohere")  # type: ignore[arg-type]
        assert bad.value.status == 422
        with pytest.raises(BadRequestError) as bad:
            client.execute_tool(call("recall", "{oops"))
        assert bad.value.body["error"]["field"] == "tool_call.function.arguments"
