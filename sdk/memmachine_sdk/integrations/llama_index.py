"""A LlamaIndex memory block on memmachine search: :class:`MemMachineMemoryBlock`.

Install with ``pip install 'memmachine-sdk[llama-index]'``. Add the block to a LlamaIndex
``Memory``::

    memory = Memory.from_defaults(
        session_id="chat-7",
        memory_blocks=[MemMachineMemoryBlock(user_id="ana", async_client=mm)],
    )

Each time the memory is read (``memory.get()`` / ``aget()``), the block searches the user's
memmachine memory (episodes of every session and profile facts, ranked by memmachine's
retrieval) with the newest messages of the conversation as the query, and the memory puts
what it found into the messages it returns (the system message, by default, inside
``<memory><memmachine>...``). Messages the ``Memory`` flushes out of its short-term window
are stored as episodes of the user's session, so later conversations find them; set
``accept_short_term_memory=False`` to keep the block read-only.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.memory.memory import BaseMemoryBlock

from memmachine_sdk import models as m
from memmachine_sdk._client import AsyncClient, Client
from memmachine_sdk.integrations._bridge import Clients, Plan

__all__ = ["MemMachineMemoryBlock"]

#: Longest query sent (the newest messages' text is cut to it).
QUERY_CHARS = 2000
_ROLES = {
    "user": "user",
    "assistant": "assistant",
    "model": "assistant",
    "chatbot": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
    "function": "tool",
}


class MemMachineMemoryBlock(BaseMemoryBlock[str]):
    """What memmachine finds for the conversation, as a LlamaIndex memory block.

    * ``user_id``: whose memory (ids as the memmachine API accepts them).
    * ``client`` / ``async_client``: the SDK client(s) to talk through; LlamaIndex calls
      the block asynchronously, so give ``async_client`` (a blocking ``client`` alone is
      run in a worker thread).
    * ``session_id``: the memmachine session flushed messages are stored in (default: the
      ``Memory``'s session id).
    * ``top_k``: how many episodes and how many profile facts at most.
    * ``query_messages``: how many of the newest messages make up the search query.
    """

    name: str = Field(default="memmachine", description="The name of the memory block.")
    description: str | None = Field(
        default="What memmachine remembers about the user that bears on the conversation: "
        "profile facts and relevant earlier messages.",
        description="A description of the memory block.",
    )
    user_id: str = Field(description="The memmachine user whose memory is searched.")
    session_id: str | None = Field(
        default=None, description="The memmachine session flushed messages are stored in."
    )
    top_k: int = Field(default=5, ge=1, description="Episodes and facts to include, at most.")
    query_messages: int = Field(
        default=3, ge=1, description="How many of the newest messages form the query."
    )
    _clients: Clients = PrivateAttr()

    def __init__(
        self,
        *,
        client: Client | None = None,
        async_client: AsyncClient | None = None,
        **data: Any,
    ) -> None:
        super().__init__(**data)
        self._clients = Clients(client, async_client, owner="MemMachineMemoryBlock")

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        return await self._clients.arun(self._recall(messages or []))

    async def _aput(self, messages: list[ChatMessage]) -> None:
        await self._clients.arun(self._store(messages))

    # ------------------------------------------------------------------ plans

    def _recall(self, messages: list[ChatMessage]) -> Plan[str]:
        texts = [_text(message) for message in messages[-self.query_messages :]]
        query = "\n".join(text for text in texts if text.strip())[-QUERY_CHARS:]
        if not query.strip():
            return ""
        user, top_k = self.user_id, self.top_k
        found: m.SearchResponse = yield lambda c: c.search(
            query, user_id=user, top_k=top_k, types=["episodic", "profile"]
        )
        in_view = {_text(message).strip() for message in messages}
        facts = [f"- {fact.tag} / {fact.feature}: {fact.value}" for fact in found.profile]
        episodes = [
            f"- [{hit.timestamp:%Y-%m-%d}] {hit.producer or hit.role}: {hit.content}"
            for hit in found.episodic
            if hit.content.strip() not in in_view
        ]
        parts = []
        if facts:
            parts.append("What memmachine knows about the user:\n" + "\n".join(facts))
        if episodes:
            parts.append("Relevant earlier messages:\n" + "\n".join(episodes))
        return "\n\n".join(parts)

    def _store(self, messages: list[ChatMessage]) -> Plan[None]:
        stored = [
            {"role": _ROLES.get(str(message.role.value), "user"), "content": _text(message)}
            for message in messages
            if _text(message).strip()
        ]
        session = self.session_id or next(
            (
                str(message.additional_kwargs["session_id"])
                for message in messages
                if message.additional_kwargs.get("session_id")
            ),
            None,
        )
        if not stored:
            return
        if session is None:
            raise ValueError(
                "MemMachineMemoryBlock has no session to store messages in: set session_id"
            )
        user = self.user_id
        yield lambda c: c.add(stored, user_id=user, session_id=session, working=False)


def _text(message: ChatMessage) -> str:
    return message.content or ""
