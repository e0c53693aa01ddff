"""Sync and async clients. Each method is one line over the shared call builders in
``_requests``; transport and error handling live in ``_Base``."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

import httpx
from pydantic import BaseModel

from memmachine_sdk import models as m
from memmachine_sdk._requests import Call, FactLike, MessageLike, Requests
from memmachine_sdk.errors import MemMachineConnectionError, error_for

T = TypeVar("T", bound=BaseModel)
MemoryTypes = Sequence[Literal["episodic", "profile", "working"]] | None
PromptFormat = Literal["openai", "anthropic", "gemini"]
WorkingMessages = Sequence[m.WorkingMessageIn | dict[str, Any] | str]

__all__ = ["AsyncMemMachineClient", "MemMachineClient"]


class _Base:
    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        user_id: str | None,
        org_id: str | None,
        project_id: str | None,
        agent_id: str | None,
        group_id: str | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._calls = Requests(
            {
                "user_id": user_id,
                "org_id": org_id,
                "project_id": project_id,
                "agent_id": agent_id,
                "group_id": group_id,
            }
        )

    @staticmethod
    def _parse(call: Call[T], response: httpx.Response) -> T | None:
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = {"error": {"code": "http_error", "message": response.text[:500]}}
            raise error_for(response.status_code, body)
        if call.response is None or response.status_code == 204:
            return None
        return call.response.model_validate(response.json())


class MemMachineClient(_Base):
    """Blocking client. ``with MemMachineClient(url) as mm: mm.add([...], user_id=...)``."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        *,
        api_key: str | None = None,
        user_id: str | None = None,
        org_id: str | None = None,
        project_id: str | None = None,
        agent_id: str | None = None,
        group_id: str | None = None,
        timeout: float = 30.0,
        http_client: httpx.Client | None = None,
    ) -> None:
        super().__init__(
            base_url,
            api_key=api_key,
            user_id=user_id,
            org_id=org_id,
            project_id=project_id,
            agent_id=agent_id,
            group_id=group_id,
        )
        self._http = http_client or httpx.Client(timeout=timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call[T]) -> T | None:
        try:
            response = self._http.request(
                call.method,
                self.base_url + call.path,
                json=call.json,
                params=call.params,
                headers=self._headers,
            )
        except httpx.TransportError as exc:
            raise MemMachineConnectionError(f"cannot reach {self.base_url}: {exc}") from exc
        return self._parse(call, response)

    def _get(self, call: Call[T]) -> T:
        result = self._send(call)
        assert result is not None
        return result

    def health(self) -> m.HealthResponse:
        return self._get(self._calls.health())

    def add(
        self,
        messages: Sequence[MessageLike],
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        working: bool = True,
    ) -> m.AddMemoriesResponse:
        """Store messages (strings, dicts or MessageIn) as episodes of a session."""
        call = self._calls.add(messages, user_id=user_id, session_id=session_id, working=working)
        return self._get(call)

    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        top_k: int = 10,
        types: MemoryTypes = None,
        expand_context: int = 0,
    ) -> m.SearchResponse:
        call = self._calls.search(
            query,
            user_id=user_id,
            session_id=session_id,
            top_k=top_k,
            types=types,
            expand_context=expand_context,
        )
        return self._get(call)

    def list_episodes(
        self,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
        offset: int = 0,
        newest_first: bool = False,
    ) -> m.EpisodeListResponse:
        call = self._calls.list_episodes(
            user_id=user_id,
            session_id=session_id,
            limit=limit,
            offset=offset,
            newest_first=newest_first,
        )
        return self._get(call)

    def get_episode(self, episode_id: str, *, user_id: str | None = None) -> m.EpisodeOut:
        return self._get(self._calls.get_episode(episode_id, user_id=user_id))

    def delete_episode(self, episode_id: str, *, user_id: str | None = None) -> None:
        self._send(self._calls.delete_episode(episode_id, user_id=user_id))

    def set_profile(
        self,
        facts: Sequence[FactLike],
        *,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> list[m.FactOut]:
        call = self._calls.set_profile(facts, user_id=user_id, session_id=session_id)
        return self._get(call).facts

    def get_profile(
        self, *, user_id: str | None = None, tag: str | None = None, feature: str | None = None
    ) -> list[m.FactOut]:
        return self._get(self._calls.get_profile(user_id=user_id, tag=tag, feature=feature)).facts

    def profile_history(
        self, tag: str, feature: str, *, user_id: str | None = None
    ) -> m.ProfileHistoryResponse:
        """The current fact for (tag, feature) and its superseded / invalidated versions."""
        return self._get(self._calls.profile_history(tag, feature, user_id=user_id))

    def search_profile(
        self, query: str, *, user_id: str | None = None, top_k: int = 10
    ) -> list[m.FactOut]:
        return self._get(self._calls.search_profile(query, user_id=user_id, top_k=top_k)).facts

    def delete_fact(self, fact_id: str, *, user_id: str | None = None) -> None:
        self._send(self._calls.delete_fact(fact_id, user_id=user_id))

    def delete_facts(
        self, *, user_id: str | None = None, tag: str | None = None, feature: str | None = None
    ) -> int:
        call = self._calls.delete_facts(user_id=user_id, tag=tag, feature=feature)
        return self._get(call).deleted

    def get_working(
        self,
        session_id: str,
        *,
        user_id: str | None = None,
        last_n: int | None = None,
        offset: int | None = None,
        limit: int | None = None,
    ) -> m.WorkingMemoryOut:
        """Working memory: all messages, the newest ``last_n``, or a page (offset/limit)."""
        call = self._calls.get_working(
            session_id, user_id=user_id, last_n=last_n, offset=offset, limit=limit
        )
        return self._get(call)

    def append_working(
        self, session_id: str, messages: WorkingMessages, *, user_id: str | None = None
    ) -> m.WorkingMemoryOut:
        return self._get(self._calls.append_working(session_id, messages, user_id=user_id))

    def put_working(
        self,
        session_id: str,
        *,
        user_id: str | None = None,
        messages: WorkingMessages | None = None,
        state: dict[str, Any] | None = None,
        summary: str | None = None,
        expected_version: int | None = None,
    ) -> m.WorkingMemoryOut:
        call = self._calls.put_working(
            session_id,
            user_id=user_id,
            messages=messages,
            state=state,
            summary=summary,
            expected_version=expected_version,
        )
        return self._get(call)

    def delete_working(self, session_id: str, *, user_id: str | None = None) -> None:
        self._send(self._calls.delete_working(session_id, user_id=user_id))

    def compact(
        self, session_id: str, *, user_id: str | None = None, wait: bool = False
    ) -> m.CompactResponse:
        """Compact the session's working memory: queue a job (``.job``), or with ``wait``
        run it now and return what it did (``.result``)."""
        return self._get(self._calls.compact(session_id, user_id=user_id, wait=wait))

    def forget_session(self, session_id: str, *, user_id: str | None = None) -> m.ForgetResponse:
        return self._get(self._calls.forget_session(session_id, user_id=user_id))

    def forget_user(self, user_id: str) -> m.ForgetResponse:
        return self._get(self._calls.forget_user(user_id))

    def memory_prompt(
        self,
        query: str,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        max_tokens: int = 2000,
        format: PromptFormat = "openai",
        top_k: int = 10,
        recent_messages: int = 20,
    ) -> m.MemoryPromptResponse:
        """The context for the next LLM call (profile facts, relevant episodes, the session
        summary and recent messages, then ``query``) within ``max_tokens``, in ``format``."""
        call = self._calls.memory_prompt(
            query,
            user_id=user_id,
            session_id=session_id,
            max_tokens=max_tokens,
            format=format,
            top_k=top_k,
            recent_messages=recent_messages,
        )
        return self._get(call)

    def tools(self) -> list[dict[str, Any]]:
        """The remember/recall/forget tool definitions in OpenAI function-calling format."""
        return self._get(self._calls.tools()).tools

    def execute_tool(
        self,
        tool_call: m.ToolCallIn | dict[str, Any],
        *,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> dict[str, Any]:
        """Run one of those tools as the model called it; returns the ``tool`` message to
        append to the conversation."""
        call = self._calls.execute_tool(tool_call, user_id=user_id, session_id=session_id)
        return self._get(call).model_dump()


class AsyncMemMachineClient(_Base):
    """Asyncio client with the same methods as :class:`MemMachineClient`, awaited."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        *,
        api_key: str | None = None,
        user_id: str | None = None,
        org_id: str | None = None,
        project_id: str | None = None,
        agent_id: str | None = None,
        group_id: str | None = None,
        timeout: float = 30.0,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(
            base_url,
            api_key=api_key,
            user_id=user_id,
            org_id=org_id,
            project_id=project_id,
            agent_id=agent_id,
            group_id=group_id,
        )
        self._http = http_client or httpx.AsyncClient(timeout=timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call[T]) -> T | None:
        try:
            response = await self._http.request(
                call.method,
                self.base_url + call.path,
                json=call.json,
                params=call.params,
                headers=self._headers,
            )
        except httpx.TransportError as exc:
            raise MemMachineConnectionError(f"cannot reach {self.base_url}: {exc}") from exc
        return self._parse(call, response)

    async def _get(self, call: Call[T]) -> T:
        result = await self._send(call)
        assert result is not None
        return result

    async def health(self) -> m.HealthResponse:
        return await self._get(self._calls.health())

    async def add(
        self,
        messages: Sequence[MessageLike],
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        working: bool = True,
    ) -> m.AddMemoriesResponse:
        call = self._calls.add(messages, user_id=user_id, session_id=session_id, working=working)
        return await self._get(call)

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        top_k: int = 10,
        types: MemoryTypes = None,
        expand_context: int = 0,
    ) -> m.SearchResponse:
        call = self._calls.search(
            query,
            user_id=user_id,
            session_id=session_id,
            top_k=top_k,
            types=types,
            expand_context=expand_context,
        )
        return await self._get(call)

    async def list_episodes(
        self,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
        offset: int = 0,
        newest_first: bool = False,
    ) -> m.EpisodeListResponse:
        call = self._calls.list_episodes(
            user_id=user_id,
            session_id=session_id,
            limit=limit,
            offset=offset,
            newest_first=newest_first,
        )
        return await self._get(call)

    async def get_episode(self, episode_id: str, *, user_id: str | None = None) -> m.EpisodeOut:
        return await self._get(self._calls.get_episode(episode_id, user_id=user_id))

    async def delete_episode(self, episode_id: str, *, user_id: str | None = None) -> None:
        await self._send(self._calls.delete_episode(episode_id, user_id=user_id))

    async def set_profile(
        self,
        facts: Sequence[FactLike],
        *,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> list[m.FactOut]:
        call = self._calls.set_profile(facts, user_id=user_id, session_id=session_id)
        return (await self._get(call)).facts

    async def get_profile(
        self, *, user_id: str | None = None, tag: str | None = None, feature: str | None = None
    ) -> list[m.FactOut]:
        call = self._calls.get_profile(user_id=user_id, tag=tag, feature=feature)
        return (await self._get(call)).facts

    async def profile_history(
        self, tag: str, feature: str, *, user_id: str | None = None
    ) -> m.ProfileHistoryResponse:
        """The current fact for (tag, feature) and its superseded / invalidated versions."""
        return await self._get(self._calls.profile_history(tag, feature, user_id=user_id))

    async def search_profile(
        self, query: str, *, user_id: str | None = None, top_k: int = 10
    ) -> list[m.FactOut]:
        call = self._calls.search_profile(query, user_id=user_id, top_k=top_k)
        return (await self._get(call)).facts

    async def delete_fact(self, fact_id: str, *, user_id: str | None = None) -> None:
        await self._send(self._calls.delete_fact(fact_id, user_id=user_id))

    async def delete_facts(
        self, *, user_id: str | None = None, tag: str | None = None, feature: str | None = None
    ) -> int:
        call = self._calls.delete_facts(user_id=user_id, tag=tag, feature=feature)
        return (await self._get(call)).deleted

    async def get_working(
        self,
        session_id: str,
        *,
        user_id: str | None = None,
        last_n: int | None = None,
        offset: int | None = None,
        limit: int | None = None,
    ) -> m.WorkingMemoryOut:
        call = self._calls.get_working(
            session_id, user_id=user_id, last_n=last_n, offset=offset, limit=limit
        )
        return await self._get(call)

    async def append_working(
        self, session_id: str, messages: WorkingMessages, *, user_id: str | None = None
    ) -> m.WorkingMemoryOut:
        call = self._calls.append_working(session_id, messages, user_id=user_id)
        return await self._get(call)

    async def put_working(
        self,
        session_id: str,
        *,
        user_id: str | None = None,
        messages: WorkingMessages | None = None,
        state: dict[str, Any] | None = None,
        summary: str | None = None,
        expected_version: int | None = None,
    ) -> m.WorkingMemoryOut:
        call = self._calls.put_working(
            session_id,
            user_id=user_id,
            messages=messages,
            state=state,
            summary=summary,
            expected_version=expected_version,
        )
        return await self._get(call)

    async def delete_working(self, session_id: str, *, user_id: str | None = None) -> None:
        await self._send(self._calls.delete_working(session_id, user_id=user_id))

    async def compact(
        self, session_id: str, *, user_id: str | None = None, wait: bool = False
    ) -> m.CompactResponse:
        """Compact the session's working memory: queue a job (``.job``), or with ``wait``
        run it now and return what it did (``.result``)."""
        return await self._get(self._calls.compact(session_id, user_id=user_id, wait=wait))

    async def forget_session(
        self, session_id: str, *, user_id: str | None = None
    ) -> m.ForgetResponse:
        return await self._get(self._calls.forget_session(session_id, user_id=user_id))

    async def forget_user(self, user_id: str) -> m.ForgetResponse:
        return await self._get(self._calls.forget_user(user_id))

    async def memory_prompt(
        self,
        query: str,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        max_tokens: int = 2000,
        format: PromptFormat = "openai",
        top_k: int = 10,
        recent_messages: int = 20,
    ) -> m.MemoryPromptResponse:
        """The context for the next LLM call (profile facts, relevant episodes, the session
        summary and recent messages, then ``query``) within ``max_tokens``, in ``format``."""
        call = self._calls.memory_prompt(
            query,
            user_id=user_id,
            session_id=session_id,
            max_tokens=max_tokens,
            format=format,
            top_k=top_k,
            recent_messages=recent_messages,
        )
        return await self._get(call)

    async def tools(self) -> list[dict[str, Any]]:
        """The remember/recall/forget tool definitions in OpenAI function-calling format."""
        return (await self._get(self._calls.tools())).tools

    async def execute_tool(
        self,
        tool_call: m.ToolCallIn | dict[str, Any],
        *,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> dict[str, Any]:
        """Run one of those tools as the model called it; returns the ``tool`` message to
        append to the conversation."""
        call = self._calls.execute_tool(tool_call, user_id=user_id, session_id=session_id)
        return (await self._get(call)).model_dump()
