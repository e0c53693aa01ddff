"""An OpenAI Agents SDK agent with memmachine: its session in working memory, and
memmachine's remember / recall / forget as its tools.

    uv run python -m examples.openai_agents_memory

``MemMachineSession`` (``memmachine-sdk[openai-agents]``) keeps each conversation's items
in the working memory of the user's session; ``amemory_tools`` gives the agent
memmachine's tools for that user, with the definitions the server publishes
(``GET /v1/tools``). Ana tells the agent something in one conversation; in a new one, the
agent recalls it. Ben's agent recalls nothing of Ana's.

The model is a stand-in so the example runs offline: ``ScriptedModel`` implements the
Agents SDK's ``Model`` interface and decides from the newest input item: a note to keep
becomes a ``remember`` call, a question a ``recall`` call, and a tool's result the answer.
With an OpenAI key, ``Agent(model="gpt-4o-mini", ...)`` instead runs the same code with a
real model deciding when to call the tools.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage
from agents.items import TResponseInputItem, TResponseStreamEvent
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from examples._common import Checks, heading
from examples._server import run_with_async_client
from memmachine_sdk import AsyncClient
from memmachine_sdk.integrations.openai_agents import MemMachineSession, amemory_tools

NAME = "openai_agents_memory"


class ScriptedModel(Model):
    """Stands in for an LLM (see the module docstring)."""

    def __init__(self) -> None:
        self.calls = 0

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        last: dict[str, Any] = dict(items[-1])
        if last.get("type") == "function_call_output":
            return self._say(_answer(json.loads(str(last["output"]))))
        text = str(last.get("content", ""))
        if text.startswith("Please remember: "):
            note = text.removeprefix("Please remember: ")
            return self._call("remember", {"content": note, "session_id": None})
        return self._call("recall", {"query": text, "top_k": 3})

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the scripted model does not stream")

    def _call(self, tool: str, arguments: dict[str, Any]) -> ModelResponse:
        self.calls += 1
        call = ResponseFunctionToolCall(
            type="function_call",
            call_id=f"call_{self.calls}",
            name=tool,
            arguments=json.dumps(arguments),
        )
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def _say(self, text: str) -> ModelResponse:
        message = ResponseOutputMessage(
            id=f"msg_{self.calls}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)


def _answer(result: dict[str, Any]) -> str:
    if "stored" in result:
        return "Noted, I'll keep that in mind."
    found = [hit["content"] for hit in result.get("episodes", [])]
    return f"From memory: {found[0]}" if found else "I don't have anything on that."


async def converse(mm: AsyncClient) -> Checks:
    checks = Checks(NAME)
    model = ScriptedModel()
    config = RunConfig(tracing_disabled=True)  # no trace upload: the example stays offline

    async def agent_for(user: str, session: str) -> Agent[Any]:
        tools = await amemory_tools(user_id=user, session_id=session, async_client=mm)
        return Agent(name="assistant", instructions="Use memory.", tools=tools, model=model)

    async def say(user: str, session: MemMachineSession, text: str) -> str:
        agent = await agent_for(user, session.session_id)
        reply = str(
            (await Runner.run(agent, text, session=session, run_config=config)).final_output
        )
        print(
            f"  [{session.session_id}] {user}: {text}\n  [{session.session_id}] assistant: {reply}"
        )
        return reply

    heading("conversation 1 with Ana")
    first = MemMachineSession("ana-1", user_id="ana", async_client=mm)
    await say("ana", first, "Please remember: I always travel with my folding bike")

    heading("conversation 2 with Ana (a new session)")
    second = MemMachineSession("ana-2", user_id="ana", async_client=mm)
    recalled = await say("ana", second, "What do I always travel with?")

    heading("a conversation with Ben")
    ben = MemMachineSession("ben-1", user_id="ben", async_client=mm)
    ben_reply = await say("ben", ben, "What do I always travel with?")

    heading("conversation 2's items, read back by a new session object")
    again = MemMachineSession("ana-2", user_id="ana", async_client=mm)
    items = await again.get_items()
    for item in items:
        print(f"  {item.get('type', 'message')}: {json.dumps(item)[:90]}")
    popped = await again.pop_item()
    left = await again.get_items()
    print(f"  pop_item() removed the {popped and popped.get('type')} at the end: {len(left)} left")

    heading("checks")
    checks.check(
        "a new conversation recalls what Ana asked to keep",
        recalled == "From memory: I always travel with my folding bike",
    )
    checks.check("Ben's agent recalls nothing of Ana's", "bike" not in ben_reply)
    checks.check(
        "the session holds the run's items in order",
        [item.get("type", "message") for item in items]
        == ["message", "function_call", "function_call_output", "message"],
    )
    checks.check("pop_item removed the last item", left == items[:-1] and popped == items[-1])
    return checks


def main() -> int:
    return run_with_async_client(NAME, converse)


if __name__ == "__main__":
    raise SystemExit(main())
