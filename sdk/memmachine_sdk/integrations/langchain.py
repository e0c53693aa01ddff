"""A LangChain chat message history on memmachine working memory:
:class:`MemMachineChatMessageHistory`.

Install with ``pip install 'memmachine-sdk[langchain]'``. The history of ``session_id`` is
that session's working memory for ``user_id`` on the server (scoped further by the SDK
client's org, project, agent and API key), so any process that opens a history for the same
user and session sees the same messages, in order, and ``GET
/v1/sessions/{session_id}/working`` shows them too.

Each message is stored with its role (human → ``user``, ai → ``assistant``, system, tool)
and its text as the content; what else LangChain keeps on it (tool calls, ids, names,
non-text content blocks) rides along in the message's metadata, so the messages read back
are the ones added. Content passes memmachine's write gate, so personal data is redacted
before it is stored. With ``episodic=True`` the messages are also stored as episodes of the
session: searchable later, across sessions, by every memmachine interface.

``clear()`` empties the session's working memory (its state and summary too). Episodes
stay: forgetting a session is ``client.forget_session(session_id, user_id=...)``.

LangChain (since langchain-core 1.6.4) marks ``BaseChatMessageHistory`` deprecated in
favour of LangGraph persistence; for a LangGraph agent see
:mod:`memmachine_sdk.integrations.langgraph`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)
from pydantic import ValidationError

from memmachine_sdk import models as m
from memmachine_sdk._client import AsyncClient, Client
from memmachine_sdk.integrations._bridge import Plan, SessionAdapter

__all__ = ["MemMachineChatMessageHistory"]

#: The metadata key holding what LangChain keeps on a message besides its text.
MESSAGE_KEY = "langchain"
_ROLES = ("user", "assistant", "system", "tool")


class MemMachineChatMessageHistory(SessionAdapter, BaseChatMessageHistory):
    """The messages of one memmachine session, for one user, as a LangChain history.

    * ``session_id`` / ``user_id``: whose session (ids as the memmachine API accepts them).
    * ``client`` / ``async_client``: the SDK client(s) to talk through (at least one; the
      async methods without ``async_client`` run ``client`` in a worker thread).
    * ``episodic``: also store added messages as episodes (long-term, searchable).
    """

    def __init__(
        self,
        session_id: str,
        *,
        user_id: str,
        client: Client | None = None,
        async_client: AsyncClient | None = None,
        episodic: bool = False,
    ) -> None:
        super().__init__(session_id, user_id=user_id, client=client, async_client=async_client)
        self.episodic = episodic

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's messages, oldest first."""
        return self._clients.run(self._read())

    async def aget_messages(self) -> list[BaseMessage]:
        return await self._clients.arun(self._read())

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` to the session, in order, in one request."""
        self._clients.run(self._add(messages))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await self._clients.arun(self._add(messages))

    def clear(self) -> None:
        """Empty the session's working memory (episodes stay)."""
        self._clients.run(self._clear_working())

    async def aclear(self) -> None:
        await self._clients.arun(self._clear_working())

    # ------------------------------------------------------------------ plans

    def _read(self) -> Plan[list[BaseMessage]]:
        working = yield from self._read_working()
        return [_from_working(message) for message in working.messages]

    def _add(self, messages: Sequence[BaseMessage]) -> Plan[None]:
        stored = [_to_working(message) for message in messages]
        if not self.episodic:
            yield from self._append_working(stored)
        elif stored:
            session, user = self.session_id, self.user_id
            yield lambda c: c.add(stored, user_id=user, session_id=session, working=True)


def _role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, ToolMessage | FunctionMessage):
        return "tool"
    if isinstance(message, ChatMessage):
        if message.role in _ROLES:
            return message.role
        return "system" if message.role == "developer" else "user"
    return "user"


def _to_working(message: BaseMessage) -> dict[str, Any]:
    """``message`` as a working-memory message: role, text, and the rest in metadata."""
    saved = message_to_dict(message)
    data = {key: value for key, value in saved["data"].items() if value not in (None, {}, [])}
    text = message.content if isinstance(message.content, str) else message.text
    if isinstance(message.content, str):
        data.pop("content", None)  # it is the stored content
    else:
        data["content"] = message.content
    if not text.strip():
        text = _describe(message)
        data["content"] = message.content
    stored: dict[str, Any] = {
        "role": _role(message),
        "content": text,
        "metadata": {MESSAGE_KEY: {"type": saved["type"], "data": data}},
    }
    if message.name:
        stored["producer"] = message.name[:256]
    return stored


def _describe(message: BaseMessage) -> str:
    """Text for a message without any: the tool calls it makes, or its type."""
    calls = getattr(message, "tool_calls", None) or []
    if calls:
        return "; ".join(f"calls {call['name']}({json.dumps(call['args'])})" for call in calls)
    return f"({message.type} message without text)"


def _from_working(message: m.WorkingMessageOut) -> BaseMessage:
    saved = message.metadata.get(MESSAGE_KEY)
    if isinstance(saved, dict) and isinstance(saved.get("data"), dict):
        data = {"content": message.content, **saved["data"]}
        try:
            return messages_from_dict([{"type": saved.get("type"), "data": data}])[0]
        except (ValueError, ValidationError):
            pass  # not a message LangChain can rebuild: read it by its role below
    if message.role == "assistant":
        return AIMessage(content=message.content)
    if message.role == "system":
        return SystemMessage(content=message.content)
    if message.role == "tool":
        return ToolMessage(content=message.content, tool_call_id="")
    return HumanMessage(content=message.content)
