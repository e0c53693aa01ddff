"""The OpenAI Agents SDK on memmachine: ``MemMachineSession`` (its ``Session`` protocol on
working memory) and memmachine's remember / recall / forget as its function tools, against
a live server; the agent's model is the loopback scripted chat server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner
from agents.items import TResponseInputItem
from agents.memory import Session, SessionSettings
from openai import AsyncOpenAI

from memmachine_sdk import AsyncClient, Client
from memmachine_sdk.integrations.openai_agents import (
    MemMachineSession,
    amemory_tools,
    memory_tools,
)
from tests.fakes.llm_fixtures import llm_server  # noqa: F401  (the fixture)
from tests.fakes.llm_server import ChatRequest, Reply, ScriptedChatServer

ITEMS: list[TResponseInputItem] = [
    {"role": "user", "content": "What's the weather in Porto?"},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "weather",
        "arguments": '{"city": "Porto"}',
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "18°C, sunny"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "It is 18°C and sunny.", "annotations": []}],
    },
]


async def test_a_session_round_trips_items_in_order_and_pop_removes_the_last(
    async_client: AsyncClient, unique: str
) -> None:
    user, sid = f"ana-{unique}", f"s-{unique}"
    session = MemMachineSession(sid, user_id=user, async_client=async_client)
    assert isinstance(session, Session)  # the SDK's own protocol check
    assert await session.get_items() == []
    await session.add_items(ITEMS[:2])
    await session.add_items(ITEMS[2:])

    # Another session object (another process, a later run) reads the same items.
    again = MemMachineSession(sid, user_id=user, async_client=async_client)
    assert await again.get_items() == ITEMS
    assert await again.get_items(limit=2) == ITEMS[2:]

    assert await again.pop_item() == ITEMS[-1]
    assert await session.get_items() == ITEMS[:-1]

    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None


async def test_working_memory_shows_the_conversation(
    async_client: AsyncClient, client: Client, unique: str
) -> None:
    user, sid = f"ana-{unique}", f"s-{unique}"
    await MemMachineSession(sid, user_id=user, async_client=async_client).add_items(ITEMS)
    working = client.get_working(sid, user_id=user)
    assert [(m.role, m.content) for m in working.messages] == [
        ("user", "What's the weather in Porto?"),
        ("assistant", 'weather({"city": "Porto"})'),
        ("tool", "18°C, sunny"),
        ("assistant", "It is 18°C and sunny."),
    ]
    # Messages written by other interfaces come back as plain message items.
    client.append_working(sid, [{"role": "user", "content": "Thanks!"}], user_id=user)
    items = await MemMachineSession(sid, user_id=user, client=client).get_items()
    assert items[-1] == {"role": "user", "content": "Thanks!"}


async def test_sessions_are_per_user_and_settings_limit_reads(
    async_client: AsyncClient, unique: str
) -> None:
    sid = f"s-{unique}"
    ana = MemMachineSession(
        sid,
        user_id=f"ana-{unique}",
        async_client=async_client,
        session_settings=SessionSettings(limit=1),
    )
    await ana.add_items(ITEMS)
    assert await ana.get_items() == ITEMS[-1:]
    assert await ana.get_items(limit=3) == ITEMS[1:]
    ben = MemMachineSession(sid, user_id=f"ben-{unique}", async_client=async_client)
    assert await ben.get_items() == []
    assert await ben.pop_item() is None


def scripted_agent(request: ChatRequest) -> str | Reply:
    """The model: remembers what the user states, recalls when asked, and answers from the
    tool's result (the last message) once a tool has run."""
    last = request.messages[-1]
    if last["role"] == "tool":
        result = json.loads(last["content"])
        if "error" in result:
            return f"That failed: {result['field']}"
        if "stored" in result:
            return "I will remember that."
        return "From memory: " + "; ".join(hit["content"] for hit in result["episodes"])
    text = str(last["content"])
    if text.startswith("Note: "):
        content = json.dumps({"content": text.removeprefix("Note: "), "session_id": None})
        return Reply(content=None, tool_calls=(("remember", content),))
    if text == "Recall badly":
        return Reply(content=None, tool_calls=(("recall", '{"query": "x", "top_k": 0}'),))
    return Reply(content=None, tool_calls=(("recall", json.dumps({"query": text, "top_k": 3})),))


@pytest.fixture
def model(llm_server: ScriptedChatServer) -> Iterator[OpenAIChatCompletionsModel]:  # noqa: F811
    llm_server.default = scripted_agent
    client = AsyncOpenAI(base_url=llm_server.base_url, api_key="sk-test", max_retries=0)
    return OpenAIChatCompletionsModel(model="scripted", openai_client=client)


async def run(agent: Agent[Any], text: str, session: MemMachineSession) -> str:
    result = await Runner.run(
        agent, text, session=session, run_config=RunConfig(tracing_disabled=True)
    )
    return str(result.final_output)


async def test_an_agent_remembers_with_the_tools_and_recalls_in_another_session(
    async_client: AsyncClient,
    model: OpenAIChatCompletionsModel,
    llm_server: ScriptedChatServer,  # noqa: F811
    unique: str,
) -> None:
    user = f"ana-{unique}"
    tools = await amemory_tools(user_id=user, session_id=f"s1-{unique}", async_client=async_client)
    assert [tool.name for tool in tools] == ["remember", "recall", "forget"]
    agent = Agent(name="assistant", instructions="Use memory.", tools=tools, model=model)

    first = MemMachineSession(f"s1-{unique}", user_id=user, async_client=async_client)
    reply = await run(agent, "Note: Ana's favourite colour is teal", first)
    assert reply == "I will remember that."

    # A new conversation: the session is empty, the long-term memory is not.
    second = MemMachineSession(f"s2-{unique}", user_id=user, async_client=async_client)
    reply = await run(agent, "favourite colour", second)
    assert reply == "From memory: Ana's favourite colour is teal"

    # The model was offered memmachine's strict tool schemas.
    offered = {
        tool["function"]["name"]: tool["function"] for tool in llm_server.requests[0].body["tools"]
    }
    assert offered["recall"]["strict"] is True
    assert offered["recall"]["parameters"]["required"] == ["query", "top_k"]
    # Each session holds its own run: input, the tool call, its output, the reply.
    kinds = [item.get("type", "message") for item in await second.get_items()]
    assert kinds == ["message", "function_call", "function_call_output", "message"]
    assert len(await first.get_items()) == 4

    # Another user's tools recall nothing of Ana's.
    ben_tools = await amemory_tools(user_id=f"ben-{unique}", async_client=async_client)
    ben_agent = Agent(name="assistant", tools=ben_tools, model=model)
    ben_session = MemMachineSession(
        f"s3-{unique}", user_id=f"ben-{unique}", async_client=async_client
    )
    assert await run(ben_agent, "favourite colour", ben_session) == "From memory: "


async def test_bad_tool_arguments_go_back_to_the_model(
    client: Client,
    async_client: AsyncClient,
    model: OpenAIChatCompletionsModel,
    unique: str,
) -> None:
    user = f"ana-{unique}"
    tools = memory_tools(user_id=user, client=client)  # blocking fetch, calls in a thread
    agent = Agent(name="assistant", tools=tools, model=model)
    session = MemMachineSession(f"s-{unique}", user_id=user, async_client=async_client)
    assert await run(agent, "Recall badly", session) == "That failed: top_k"
