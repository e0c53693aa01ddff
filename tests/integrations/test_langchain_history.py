"""LangChain's ``BaseChatMessageHistory`` on memmachine working memory
(``MemMachineChatMessageHistory``), against a live server."""

from __future__ import annotations

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

from memmachine_sdk import AsyncClient, Client
from memmachine_sdk.integrations.langchain import MemMachineChatMessageHistory


def conversation() -> list[BaseMessage]:
    return [
        SystemMessage("You are a travel assistant."),
        HumanMessage("Book me a train to Porto on Friday", name="ana"),
        AIMessage(
            "",
            tool_calls=[{"name": "book_train", "args": {"to": "Porto", "day": "Fri"}, "id": "c1"}],
        ),
        ToolMessage('{"booked": true, "seat": "12A"}', tool_call_id="c1"),
        AIMessage("Done: seat 12A on Friday's train to Porto."),
    ]


def test_the_history_survives_a_new_history_object_for_the_same_session(
    client: Client, unique: str
) -> None:
    user, session = f"ana-{unique}", f"trip-{unique}"
    MemMachineChatMessageHistory(session, user_id=user, client=client).add_messages(conversation())

    again = MemMachineChatMessageHistory(session, user_id=user, client=client)
    read = again.messages
    assert [type(message) for message in read] == [type(m) for m in conversation()]
    assert [message.content for message in read] == [m.content for m in conversation()]
    assert read[1].name == "ana"
    assert isinstance(read[2], AIMessage)
    assert read[2].tool_calls == [
        {
            "name": "book_train",
            "args": {"to": "Porto", "day": "Fri"},
            "id": "c1",
            "type": "tool_call",
        }
    ]
    assert isinstance(read[3], ToolMessage)
    assert read[3].tool_call_id == "c1"

    # The session's working memory holds them for every other interface too.
    working = client.get_working(session, user_id=user)
    assert [message.role for message in working.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert working.messages[2].content == 'calls book_train({"to": "Porto", "day": "Fri"})'


def test_another_user_or_session_has_its_own_history(client: Client, unique: str) -> None:
    user, session = f"ana-{unique}", f"s-{unique}"
    MemMachineChatMessageHistory(session, user_id=user, client=client).add_user_message("hi")
    assert (
        MemMachineChatMessageHistory(session, user_id=f"ben-{unique}", client=client).messages == []
    )
    assert (
        MemMachineChatMessageHistory(f"other-{unique}", user_id=user, client=client).messages == []
    )


def test_clear_empties_the_history_and_episodes_stay_when_stored(
    client: Client, unique: str
) -> None:
    user, session = f"ana-{unique}", f"s-{unique}"
    history = MemMachineChatMessageHistory(session, user_id=user, client=client, episodic=True)
    history.add_messages([HumanMessage("My passport expires in March"), AIMessage("Noted.")])
    history.clear()
    assert history.messages == []
    # With episodic=True the messages were also kept as long-term episodes.
    hits = client.search("when does my passport expire", user_id=user, types=["episodic"])
    assert hits.episodic[0].content == "My passport expires in March"


def test_personal_data_is_redacted_before_it_is_stored(client: Client, unique: str) -> None:
    user, session = f"ana-{unique}", f"s-{unique}"
    history = MemMachineChatMessageHistory(session, user_id=user, client=client)
    history.add_user_message("Mail the tickets to ana.lopez@example.com")
    (message,) = history.messages
    assert isinstance(message.content, str)
    assert "ana.lopez@example.com" not in message.content
    assert message.content.startswith("Mail the tickets to ")


async def test_the_async_methods(async_client: AsyncClient, unique: str) -> None:
    user, session = f"ana-{unique}", f"s-{unique}"
    history = MemMachineChatMessageHistory(session, user_id=user, async_client=async_client)
    await history.aadd_messages([HumanMessage("one"), AIMessage("two")])
    await history.aadd_messages([HumanMessage("three")])
    assert [m.content for m in await history.aget_messages()] == ["one", "two", "three"]
    await history.aclear()
    assert await history.aget_messages() == []
    with pytest.raises(TypeError, match="only an async_client"):
        history.add_user_message("blocking call without a blocking client")


def test_a_chain_answers_from_the_history_it_reloads(client: Client, unique: str) -> None:
    """A prompt with the history, a fake chat model: what a LangChain app does per turn."""
    user, session = f"ana-{unique}", f"s-{unique}"
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are helpful."), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    model = GenericFakeChatModel(messages=iter(["Hello Ana!", "You said your name is Ana."]))
    chain = prompt | model
    seen: list[int] = []

    for question in ["Hi, I am Ana", "What is my name?"]:
        history = MemMachineChatMessageHistory(session, user_id=user, client=client)
        past = history.messages
        seen.append(len(past))
        reply = chain.invoke({"history": past, "question": question})
        history.add_messages([HumanMessage(question), reply])

    assert seen == [0, 2]  # the second turn's prompt carried the first turn
    final = MemMachineChatMessageHistory(session, user_id=user, client=client).messages
    assert [m.content for m in final] == [
        "Hi, I am Ana",
        "Hello Ana!",
        "What is my name?",
        "You said your name is Ana.",
    ]
