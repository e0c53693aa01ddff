"""A LangGraph graph with memmachine as its long-term memory store.

    uv run python -m examples.langgraph_memory

The graph has one node and no language model: "Remember: ..." stores a memory for the user
the run is for; anything else is answered with the user's most relevant memory. It is
compiled with ``MemMachineStore`` (``memmachine-sdk[langgraph]``) as its store and an
in-memory checkpointer for threads. Memories live in the namespace ``(user_id,
"memories")``, which memmachine keeps as that user's profile facts (tag ``memories``), so a
new thread remembers, another user never sees them, and every memmachine interface (REST,
MCP, memory prompts) knows them too.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime

from examples._common import Checks, heading
from examples._server import run_with_client
from memmachine_sdk import Client
from memmachine_sdk.integrations.langgraph import MemMachineStore

NAME = "langgraph_memory"


@dataclass
class Context:
    user_id: str


class State(TypedDict, total=False):
    message: str
    reply: str


def assistant(state: State, runtime: Runtime[Context]) -> State:
    """Store what the user asks to remember; answer anything else from memory."""
    assert runtime.store is not None
    namespace = (runtime.context.user_id, "memories")
    message = state["message"]
    if message.startswith("Remember: "):
        memory = message.removeprefix("Remember: ")
        runtime.store.put(namespace, uuid.uuid4().hex, {"text": memory})
        return {"reply": f"I'll remember: {memory}"}
    found = runtime.store.search(namespace, query=message, limit=1)
    if not found:
        return {"reply": "I don't know anything about that yet."}
    return {"reply": f"From memory: {found[0].value['text']}"}


def build_graph(store: MemMachineStore, node: Any = assistant) -> Any:
    """The one-node graph, compiled with ``store`` and an in-memory checkpointer."""
    builder = StateGraph(State, context_schema=Context)
    builder.add_node("assistant", node)
    builder.add_edge(START, "assistant")
    return builder.compile(checkpointer=InMemorySaver(), store=store)


def remember_across_threads(mm: Client) -> Checks:
    checks = Checks(NAME)
    graph = build_graph(MemMachineStore(mm))

    def say(user: str, thread: str, message: str) -> str:
        config = {"configurable": {"thread_id": thread}}
        reply = str(graph.invoke({"message": message}, config, context=Context(user))["reply"])
        print(f"  [{thread}] {user}: {message}\n  [{thread}] assistant: {reply}")
        return reply

    heading("thread 1: Ana tells the assistant two things")
    say("ana", "ana-1", "Remember: I am allergic to peanuts")
    say("ana", "ana-1", "Remember: my dog is a beagle called Toast")

    heading("thread 2: a new conversation with Ana")
    allergy = say("ana", "ana-2", "What am I allergic to?")
    dog = say("ana", "ana-2", "What is my dog called?")

    heading("thread 3: Ben asks the same")
    ben = say("ben", "ben-1", "What am I allergic to?")

    heading("what memmachine holds for Ana (profile facts, tag 'memories')")
    facts = mm.get_profile(user_id="ana", tag="memories")
    for fact in facts:
        print(f"  {fact.tag} / {fact.feature[:8]}…: {fact.value}  (source {fact.source})")

    heading("checks")
    checks.check("a new thread recalls Ana's allergy", allergy.endswith("allergic to peanuts"))
    checks.check("a new thread recalls Ana's dog", dog.endswith("a beagle called Toast"))
    checks.check("Ben never sees Ana's memories", "peanuts" not in ben)
    checks.check(
        "Ana's memories are memmachine profile facts",
        sorted(fact.value for fact in facts)
        == ["I am allergic to peanuts", "my dog is a beagle called Toast"],
    )
    return checks


def main() -> int:
    return run_with_client(NAME, remember_across_threads)


if __name__ == "__main__":
    raise SystemExit(main())
