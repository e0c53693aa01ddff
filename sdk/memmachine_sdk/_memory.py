"""Scoped handles: ``client.memory(user_id=..., session_id=...)`` binds the ids once, so
every call on the handle reads and writes that user's (and session's) memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel

from memmachine_sdk import models as m
from memmachine_sdk._requests import Call, FactLike, MessageLike, Requests, invalid, validate

__all__ = [
    "AsyncMemory",
    "AsyncProfile",
    "AsyncState",
    "Memory",
    "Profile",
    "SessionState",
    "State",
]

T = TypeVar("T", bound=BaseModel)


class Client(Protocol):
    """What a handle sends its calls through (:class:`memmachine_sdk.Client` is one)."""

    def _send(self, call: Call[T]) -> T | None: ...
    def _get(self, call: Call[T]) -> T: ...


class AsyncClient(Protocol):
    """What an async handle sends its calls through (:class:`memmachine_sdk.AsyncClient`)."""

    async def _send(self, call: Call[T]) -> T | None: ...
    async def _get(self, call: Call[T]) -> T: ...


MemoryTypes = Sequence[Literal["episodic", "profile", "working"]] | None
PromptFormat = Literal["openai", "anthropic", "gemini"]


@dataclass(frozen=True)
class SessionState:
    """A session's working-memory state and the version it was read or written at.

    ``version`` is 0 for a session never written and grows by one with every write to
    the session's working memory (messages included); pass it as ``expected_version`` to
    make the next write conditional."""

    value: dict[str, Any]
    version: int
    updated_at: datetime | None

    @classmethod
    def of(cls, working: m.WorkingMemoryOut) -> SessionState:
        return cls(value=working.state, version=working.version, updated_at=working.updated_at)


def _as_list(items: Any, single: tuple[type, ...]) -> list[Any]:
    """One item (of a ``single`` type) becomes a one-item list; a sequence a list."""
    return [items] if isinstance(items, single) else list(items)


class _Scoped:
    """The ids of a handle, checked once when it is made."""

    def __init__(self, ids: dict[str, str | None], session_id: str | None) -> None:
        checked = validate(m.ScopeFields, **{**ids, "session_id": session_id})
        if checked.user_id is None:
            raise invalid(
                "user_id", "a memory handle needs a user_id (on the handle or the client)"
            )
        self.user_id: str = checked.user_id
        self.session_id = checked.session_id
        self.agent_id = checked.agent_id
        self.group_id = checked.group_id
        self.org_id = checked.org_id
        self.project_id = checked.project_id
        self._calls = Requests(
            {
                "user_id": self.user_id,
                "agent_id": self.agent_id,
                "group_id": self.group_id,
                "org_id": self.org_id,
                "project_id": self.project_id,
            }
        )

    def _session(self, what: str) -> str:
        if self.session_id is None:
            raise invalid(
                "session_id", f"{what} needs a session: client.memory(..., session_id=...)"
            )
        return self.session_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}(user_id={self.user_id!r}, session_id={self.session_id!r})"


# ---------------------------------------------------------------------------- sync


class Memory(_Scoped):
    """One user's memory, or one session's with ``session_id``; made by
    :meth:`Client.memory`. ``profile`` and ``state`` are sub-handles."""

    def __init__(self, client: Client, ids: dict[str, str | None], session_id: str | None):
        super().__init__(ids, session_id)
        self._client = client
        #: The user's profile facts.
        self.profile = Profile(self)
        #: The session's working-memory state (needs ``session_id``).
        self.state = State(self)

    def add(
        self, messages: MessageLike | Sequence[MessageLike], *, working: bool = True
    ) -> m.AddMemoriesResponse:
        """Store one message or several (text, dicts or ``MessageIn``) as episodes of the
        session, in order, and with ``working`` also in its working memory. All or
        nothing. Not retried after a timeout, which could store them twice."""
        items = _as_list(messages, (str, dict, BaseModel))
        call = self._calls.add(
            items, user_id=None, session_id=self._session("add"), working=working
        )
        return self._client._get(call)

    def search(
        self,
        query: str,
        *,
        top_k: int = 10,
        types: MemoryTypes = None,
        expand_context: int = 0,
    ) -> m.SearchResponse:
        """Episodes, profile facts and (with a session) working memory relevant to
        ``query``. With a session, episodic hits come from that session only."""
        call = self._calls.search(
            query,
            user_id=None,
            session_id=self.session_id,
            top_k=top_k,
            types=types,
            expand_context=expand_context,
        )
        return self._client._get(call)

    def episodes(
        self, *, limit: int = 100, offset: int = 0, newest_first: bool = False
    ) -> m.EpisodeListResponse:
        """A page of the stored episodes (of the session, when the handle has one)."""
        call = self._calls.list_episodes(
            user_id=None,
            session_id=self.session_id,
            limit=limit,
            offset=offset,
            newest_first=newest_first,
        )
        return self._client._get(call)

    def prompt(
        self,
        query: str,
        *,
        max_tokens: int = 2000,
        format: PromptFormat = "openai",
        top_k: int = 10,
        recent_messages: int = 20,
    ) -> m.MemoryPromptResponse:
        """The messages for the next LLM call: what memory knows that is relevant to
        ``query`` (profile, episodes, and with a session its summary and newest messages),
        then ``query`` itself, within ``max_tokens``, in ``format``."""
        call = self._calls.memory_prompt(
            query,
            user_id=None,
            session_id=self.session_id,
            max_tokens=max_tokens,
            format=format,
            top_k=top_k,
            recent_messages=recent_messages,
        )
        return self._client._get(call)

    def forget(self) -> m.ForgetResponse:
        """Delete the session (its episodes, working memory and the facts sourced from
        it) when the handle has one; otherwise everything stored for the user, across
        all agents, groups and sessions."""
        if self.session_id is not None:
            return self._client._get(self._calls.forget_session(self.session_id, user_id=None))
        return self._client._get(self._calls.forget_user(self.user_id))


class Profile:
    """The user's profile facts (one value per ``(tag, feature)``); ``memory.profile``."""

    def __init__(self, memory: Memory) -> None:
        self._memory = memory
        self._client = memory._client
        self._calls = memory._calls

    def get(self, *, tag: str | None = None, feature: str | None = None) -> list[m.FactOut]:
        """The current facts, all or those with ``tag`` (and ``feature``)."""
        return self._client._get(
            self._calls.get_profile(user_id=None, tag=tag, feature=feature)
        ).facts

    def set(self, facts: FactLike | Sequence[FactLike]) -> list[m.FactOut]:
        """Set one fact or several (``{"tag", "feature", "value"}`` dicts or ``FactIn``);
        a fact replaces the value for its ``(tag, feature)``, keeping the old one in its
        history. With a session, the facts record it as their source."""
        items = _as_list(facts, (dict, BaseModel))
        call = self._calls.set_profile(items, user_id=None, session_id=self._memory.session_id)
        return self._client._get(call).facts

    def search(self, query: str, *, top_k: int = 10) -> list[m.FactOut]:
        """Facts relevant to ``query``, best first."""
        return self._client._get(self._calls.search_profile(query, user_id=None, top_k=top_k)).facts

    def history(self, tag: str, feature: str) -> m.ProfileHistoryResponse:
        """The current fact for ``(tag, feature)`` and its closed versions, oldest first."""
        return self._client._get(self._calls.profile_history(tag, feature, user_id=None))

    def delete(self, *, tag: str | None = None, feature: str | None = None) -> int:
        """Delete the facts with ``tag`` (and ``feature``), or all; returns how many."""
        call = self._calls.delete_facts(user_id=None, tag=tag, feature=feature)
        return self._client._get(call).deleted

    def delete_fact(self, fact_id: str) -> None:
        """Delete one fact by id (``NotFoundError`` if the user has no such fact)."""
        self._client._send(self._calls.delete_fact(fact_id, user_id=None))


class State:
    """The session's working-memory state, a JSON object with a version;
    ``memory.state``. Every method needs a handle with a ``session_id``."""

    def __init__(self, memory: Memory) -> None:
        self._memory = memory
        self._client = memory._client
        self._calls = memory._calls

    def get(self) -> SessionState:
        """The state now (``{}`` and version 0 for a session never written)."""
        session = self._memory._session("state.get")
        call = self._calls.get_working(session, user_id=None, last_n=0)
        return SessionState.of(self._client._get(call))

    def set(self, value: dict[str, Any], *, expected_version: int | None = None) -> SessionState:
        """Replace the state (messages and summary stay). With ``expected_version`` the
        write happens only if the session is still at that version, else
        ``ConflictError`` with ``current_version``."""
        session = self._memory._session("state.set")
        call = self._calls.put_working(
            session,
            user_id=None,
            messages=None,
            state=value,
            summary=None,
            expected_version=expected_version,
        )
        return SessionState.of(self._client._get(call))


# ---------------------------------------------------------------------------- async


class AsyncMemory(_Scoped):
    """:class:`Memory` with awaitable methods; made by :meth:`AsyncClient.memory`."""

    def __init__(
        self, client: AsyncClient, ids: dict[str, str | None], session_id: str | None
    ) -> None:
        super().__init__(ids, session_id)
        self._client = client
        #: The user's profile facts.
        self.profile = AsyncProfile(self)
        #: The session's working-memory state (needs ``session_id``).
        self.state = AsyncState(self)

    async def add(
        self, messages: MessageLike | Sequence[MessageLike], *, working: bool = True
    ) -> m.AddMemoriesResponse:
        """See :meth:`Memory.add`."""
        items = _as_list(messages, (str, dict, BaseModel))
        call = self._calls.add(
            items, user_id=None, session_id=self._session("add"), working=working
        )
        return await self._client._get(call)

    async def search(
        self,
        query: str,
        *,
        top_k: int = 10,
        types: MemoryTypes = None,
        expand_context: int = 0,
    ) -> m.SearchResponse:
        """See :meth:`Memory.search`."""
        call = self._calls.search(
            query,
            user_id=None,
            session_id=self.session_id,
            top_k=top_k,
            types=types,
            expand_context=expand_context,
        )
        return await self._client._get(call)

    async def episodes(
        self, *, limit: int = 100, offset: int = 0, newest_first: bool = False
    ) -> m.EpisodeListResponse:
        """See :meth:`Memory.episodes`."""
        call = self._calls.list_episodes(
            user_id=None,
            session_id=self.session_id,
            limit=limit,
            offset=offset,
            newest_first=newest_first,
        )
        return await self._client._get(call)

    async def prompt(
        self,
        query: str,
        *,
        max_tokens: int = 2000,
        format: PromptFormat = "openai",
        top_k: int = 10,
        recent_messages: int = 20,
    ) -> m.MemoryPromptResponse:
        """See :meth:`Memory.prompt`."""
        call = self._calls.memory_prompt(
            query,
            user_id=None,
            session_id=self.session_id,
            max_tokens=max_tokens,
            format=format,
            top_k=top_k,
            recent_messages=recent_messages,
        )
        return await self._client._get(call)

    async def forget(self) -> m.ForgetResponse:
        """See :meth:`Memory.forget`."""
        if self.session_id is not None:
            call = self._calls.forget_session(self.session_id, user_id=None)
        else:
            call = self._calls.forget_user(self.user_id)
        return await self._client._get(call)


class AsyncProfile:
    """:class:`Profile` with awaitable methods."""

    def __init__(self, memory: AsyncMemory) -> None:
        self._memory = memory
        self._client = memory._client
        self._calls = memory._calls

    async def get(self, *, tag: str | None = None, feature: str | None = None) -> list[m.FactOut]:
        call = self._calls.get_profile(user_id=None, tag=tag, feature=feature)
        return (await self._client._get(call)).facts

    async def set(self, facts: FactLike | Sequence[FactLike]) -> list[m.FactOut]:
        items = _as_list(facts, (dict, BaseModel))
        call = self._calls.set_profile(items, user_id=None, session_id=self._memory.session_id)
        return (await self._client._get(call)).facts

    async def search(self, query: str, *, top_k: int = 10) -> list[m.FactOut]:
        call = self._calls.search_profile(query, user_id=None, top_k=top_k)
        return (await self._client._get(call)).facts

    async def history(self, tag: str, feature: str) -> m.ProfileHistoryResponse:
        return await self._client._get(self._calls.profile_history(tag, feature, user_id=None))

    async def delete(self, *, tag: str | None = None, feature: str | None = None) -> int:
        call = self._calls.delete_facts(user_id=None, tag=tag, feature=feature)
        return (await self._client._get(call)).deleted

    async def delete_fact(self, fact_id: str) -> None:
        await self._client._send(self._calls.delete_fact(fact_id, user_id=None))


class AsyncState:
    """:class:`State` with awaitable methods."""

    def __init__(self, memory: AsyncMemory) -> None:
        self._memory = memory
        self._client = memory._client
        self._calls = memory._calls

    async def get(self) -> SessionState:
        session = self._memory._session("state.get")
        call = self._calls.get_working(session, user_id=None, last_n=0)
        return SessionState.of(await self._client._get(call))

    async def set(
        self, value: dict[str, Any], *, expected_version: int | None = None
    ) -> SessionState:
        session = self._memory._session("state.set")
        call = self._calls.put_working(
            session,
            user_id=None,
            messages=None,
            state=value,
            summary=None,
            expected_version=expected_version,
        )
        return SessionState.of(await self._client._get(call))
