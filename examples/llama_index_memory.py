"""A LlamaIndex chat memory that brings in what memmachine knows about the user.

    uv run python -m examples.llama_index_memory

A LlamaIndex ``Memory`` with ``MemMachineMemoryBlock`` (``memmachine-sdk[llama-index]``):
every time the chat reads its memory, the block searches the user's memmachine memory with
the newest messages and the memory puts what it found into the system message it returns,
ready for any LlamaIndex LLM (none is called here). Messages the memory flushes out of its
short-term window go the other way: they are stored in memmachine as episodes, so a later
chat finds them.
"""

from __future__ import annotations

from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory

from examples._common import Checks, heading
from examples._server import run_with_async_client
from memmachine_sdk import AsyncClient
from memmachine_sdk.integrations.llama_index import MemMachineMemoryBlock

NAME = "llama_index_memory"


def show(messages: list[ChatMessage]) -> None:
    for message in messages:
        for line in (message.content or "").splitlines():
            print(f"  {message.role.value:>9} | {line}")


async def chat(mm: AsyncClient) -> Checks:
    checks = Checks(NAME)

    heading("what memmachine already holds (written over the SDK by earlier sessions)")
    await mm.add(
        ["I'm vegetarian and allergic to peanuts", "My daughter Lia turns six in May"],
        user_id="ana",
        session_id="onboarding",
        working=False,
    )
    await mm.add(["I am allergic to shellfish"], user_id="ben", session_id="onboarding")
    await mm.set_profile([{"tag": "home", "feature": "city", "value": "Porto"}], user_id="ana")
    print("  ana: 2 messages, 1 profile fact; ben: 1 message")

    heading("a new LlamaIndex chat with Ana: the messages for the LLM")
    memory = Memory.from_defaults(
        session_id="dinner-planning",
        memory_blocks=[MemMachineMemoryBlock(user_id="ana", async_client=mm)],
    )
    await memory.aput(
        ChatMessage(role="user", content="Plan a dinner at home in Porto: what am I allergic to?")
    )
    messages = await memory.aget()
    show(messages)
    system = messages[0].content or ""

    heading("a small window: older turns are flushed into memmachine")
    window = Memory.from_defaults(
        session_id="trip-chat",
        token_limit=60,
        chat_history_token_ratio=0.5,
        token_flush_size=20,
        memory_blocks=[MemMachineMemoryBlock(user_id="ana", async_client=mm)],
    )
    for role, text in [
        ("user", "Our flight to Madeira leaves Saturday at 7:40 from Porto airport."),
        ("assistant", "Got it: Saturday 7:40, Porto to Madeira."),
        ("user", "We need a car seat for Lia at the rental desk too."),
        ("assistant", "Noted: a child car seat at the rental desk."),
    ]:
        await window.aput(ChatMessage(role=role, content=text))
    flushed = (await mm.list_episodes(user_id="ana", session_id="trip-chat")).episodes
    for episode in flushed:
        print(f"  episode in memmachine: {episode.role}: {episode.content}")
    later = Memory.from_defaults(
        session_id="packing",
        memory_blocks=[MemMachineMemoryBlock(user_id="ana", async_client=mm)],
    )
    await later.aput(ChatMessage(role="user", content="When does our flight to Madeira leave?"))
    later_system = (await later.aget())[0].content or ""
    print("  a later chat's memory block:")
    show((await later.aget())[:1])

    heading("checks")
    checks.check("the memory carries Ana's allergy", "allergic to peanuts" in system)
    checks.check("the memory carries Ana's profile", "home / city: Porto" in system)
    checks.check("nothing of Ben's reaches Ana's prompt", "shellfish" not in system)
    checks.check("flushed messages became episodes", len(flushed) >= 1)
    checks.check("a later chat finds the flushed turn", "leaves Saturday at 7:40" in later_system)
    return checks


def main() -> int:
    return run_with_async_client(NAME, chat)


if __name__ == "__main__":
    raise SystemExit(main())
