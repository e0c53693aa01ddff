"""A LlamaIndex ``Memory`` with ``MemMachineMemoryBlock``, against a live server: the
messages it returns carry what memmachine finds for the conversation, and messages it
flushes out of its window become memmachine episodes."""

from __future__ import annotations

from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory

from memmachine_sdk import AsyncClient, Client
from memmachine_sdk.integrations.llama_index import MemMachineMemoryBlock


def seed(client: Client, user: str, session: str, *lines: str) -> None:
    client.add(list(lines), user_id=user, session_id=session, working=False)


def system_text(messages: list[ChatMessage]) -> str:
    assert messages[0].role.value == "system"
    return messages[0].content or ""


async def test_the_memory_puts_the_relevant_memory_into_its_messages(
    client: Client, async_client: AsyncClient, unique: str
) -> None:
    ana, ben = f"ana-{unique}", f"ben-{unique}"
    seed(client, ana, "march", "I am allergic to peanuts", "My sister lives in Porto")
    seed(client, ben, "march", "I am allergic to shellfish")
    client.set_profile([{"tag": "diet", "feature": "style", "value": "vegetarian"}], user_id=ana)

    memory = Memory.from_defaults(
        session_id=f"chat-{unique}",
        memory_blocks=[MemMachineMemoryBlock(user_id=ana, async_client=async_client)],
    )
    await memory.aput(ChatMessage(role="user", content="Which snacks am I allergic to?"))
    messages = await memory.aget()

    memory_text = system_text(messages)
    assert "<memmachine>" in memory_text
    assert "I am allergic to peanuts" in memory_text
    assert "diet / style: vegetarian" in memory_text
    assert "shellfish" not in memory_text  # Ben's memory never reaches Ana's prompt
    assert messages[-1].content == "Which snacks am I allergic to?"
    # The best match comes first among the earlier messages.
    earlier = memory_text.split("Relevant earlier messages:\n", 1)[1]
    assert earlier.splitlines()[0].endswith("user: I am allergic to peanuts")


async def test_nothing_is_added_for_a_user_with_no_memory(
    async_client: AsyncClient, unique: str
) -> None:
    memory = Memory.from_defaults(
        session_id=f"chat-{unique}",
        memory_blocks=[MemMachineMemoryBlock(user_id=f"new-{unique}", async_client=async_client)],
    )
    await memory.aput(ChatMessage(role="user", content="Hello there"))
    messages = await memory.aget()
    assert [(m.role.value, m.content) for m in messages] == [("user", "Hello there")]


async def test_messages_flushed_from_the_window_become_episodes(
    client: Client, async_client: AsyncClient, unique: str
) -> None:
    user, chat = f"ana-{unique}", f"chat-{unique}"
    memory = Memory.from_defaults(
        session_id=chat,
        token_limit=60,
        chat_history_token_ratio=0.5,
        token_flush_size=20,
        memory_blocks=[MemMachineMemoryBlock(user_id=user, async_client=async_client)],
    )
    turns = [
        ("user", "My train to Porto leaves at nine on Friday morning from Lisbon."),
        ("assistant", "Noted: Friday at nine, Lisbon to Porto."),
        ("user", "Also, my seat is 12A in coach four near the cafe car."),
        ("assistant", "Noted: seat 12A, coach four."),
    ]
    for role, text in turns:
        await memory.aput(ChatMessage(role=role, content=text))

    stored = client.list_episodes(user_id=user, session_id=chat).episodes
    assert stored, "nothing was flushed into memmachine"
    assert [e.content for e in stored] == [text for _, text in turns][: len(stored)]
    assert stored[0].role == "user"
    # Later, the flushed turn is found again for a question about it.
    later = Memory.from_defaults(
        session_id=f"later-{unique}",
        memory_blocks=[MemMachineMemoryBlock(user_id=user, async_client=async_client)],
    )
    await later.aput(ChatMessage(role="user", content="When does my train to Porto leave?"))
    assert "leaves at nine on Friday" in system_text(await later.aget())


def test_the_blocking_memory_api_with_a_blocking_client(client: Client, unique: str) -> None:
    user = f"ana-{unique}"
    seed(client, user, "s1", "My locker code is 2231")
    memory = Memory.from_defaults(
        session_id=f"chat-{unique}",
        memory_blocks=[MemMachineMemoryBlock(user_id=user, client=client)],
    )
    memory.put(ChatMessage(role="user", content="What is my locker code?"))
    assert "My locker code is 2231" in system_text(memory.get())
