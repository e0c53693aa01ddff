"""The sync and async clients. Each method is one line over the shared call builders in
``_requests``; sending, retrying and error mapping live in ``_Base`` and the two
``_send`` loops."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self, TypeVar
from urllib.parse import unquote

import httpx
from pydantic import BaseModel, ValidationError

from memmachine_sdk import models as m
from memmachine_sdk._memory import AsyncMemory, Memory
from memmachine_sdk._operations import AsyncOperations, SyncOperations
from memmachine_sdk._requests import Call, FactLike, MessageLike, Requests
from memmachine_sdk._retry import RetryPolicy, connection_error
from memmachine_sdk.errors import (
    MemMachineAPIError,
    MemMachineError,
    error_for,
    parse_retry_after,
)

T = TypeVar("T", bound=BaseModel)
MemoryTypes = Sequence[Literal["episodic", "profile", "working"]] | None
PromptFormat = Literal["openai", "anthropic", "gemini"]
WorkingMessages = Sequence[m.WorkingMessageIn | dict[str, Any] | str]

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "AsyncClient",
    "AsyncMemMachineClient",
    "Client",
    "MemMachineClient",
]

#: Where the clients connect when neither ``base_url`` nor ``MEMMACHINE_URL`` says.
DEFAULT_URL = "http://127.0.0.1:8080"
#: 30 s for the whole exchange, 5 s to open the connection.
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)

log = logging.getLogger("memmachine_sdk")


class _Base:
    """Configuration and the parts of sending a call that do not block."""

    def __init__(
        self,
        base_url: str | None,
        *,
        api_key: str | None,
        ids: dict[str, str | None],
        max_retries: int,
        retry: RetryPolicy | None,
        injected_url: str | None,
    ) -> None:
        url = base_url or injected_url or os.environ.get("MEMMACHINE_URL") or DEFAULT_URL
        self.base_url = url.rstrip("/")
        key = api_key if api_key is not None else os.environ.get("MEMMACHINE_API_KEY")
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.retry = retry if retry is not None else RetryPolicy(max_retries=max_retries)
        self._rng = random.Random()
        self._ids = {name: value for name, value in ids.items() if value is not None}
        self._calls = Requests(dict(ids))
        #: Per-request timeout for an injected HTTP client (``None``: the client's own).
        self._timeout: httpx.Timeout | None = None

    def _scope_ids(self, **ids: str | None) -> dict[str, str | None]:
        """The client's default ids overridden by the given ones (``None`` keeps them)."""
        merged: dict[str, str | None] = dict(self._ids)
        merged.update({name: value for name, value in ids.items() if value is not None})
        return merged

    def _request_args(self, call: Call[Any]) -> dict[str, Any]:
        args: dict[str, Any] = {
            "method": call.method,
            "url": self.base_url + call.path,
            "json": call.json,
            "params": call.params,
            "headers": self._headers,
        }
        if call.files is not None:
            args.update(json=None, files=call.files, data=call.form)
        if call.idempotency_key is not None:
            args["headers"] = {**self._headers, "Idempotency-Key": call.idempotency_key}
        if self._timeout is not None:
            args["timeout"] = self._timeout
        return args

    @staticmethod
    def _error(response: httpx.Response) -> MemMachineAPIError:
        try:
            body = response.json()
        except ValueError:
            body = {"error": {"code": "http_error", "message": response.text[:500]}}
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        return error_for(response.status_code, body, retry_after=retry_after)

    @staticmethod
    def _parse(call: Call[T], response: httpx.Response) -> T | None:
        if call.response is None or response.status_code == 204:
            return None
        if call.raw:
            return call.response.model_validate(
                {
                    "content": response.content,
                    "mime": response.headers.get("content-type", "application/octet-stream"),
                    "name": _download_name(response.headers.get("content-disposition", "")),
                }
            )
        try:
            # A field the models do not know is a newer server's addition: read past it,
            # so a server upgraded before its clients keeps answering them.
            return call.response.model_validate(response.json(), extra="ignore")
        except (ValueError, ValidationError) as exc:
            # pydantic's ValidationError is a ValueError; a JSON decoding error too.
            raise MemMachineAPIError(
                response.status_code,
                "invalid_response",
                f"the server's answer to {call.method} {call.path} is not a "
                f"{call.response.__name__}: {str(exc)[:300]}",
            ) from None

    def _retry_delay(self, call: Call[Any], error: MemMachineError, retry: int) -> float | None:
        delay = self.retry.delay(
            error, retry=retry, idempotent=bool(call.idempotent), rng=self._rng
        )
        if delay is not None:
            log.info(
                "retrying %s %s in %.2fs after %s (retry %d of %d)",
                call.method,
                call.path,
                delay,
                f"HTTP {error.status}" if error.status else error.code,
                retry + 1,
                self.retry.max_retries,
            )
        return delay


class Client(SyncOperations, _Base):
    """Blocking client for the memmachine REST API.

    ``with Client(user_id="ana") as mm: mm.add(["hello"], session_id="s1")``, or scoped:
    ``mm.memory(session_id="s1").add("hello")``.

    * ``base_url``: the server; default ``MEMMACHINE_URL``, else ``http://127.0.0.1:8080``
      (or the injected ``http_client``'s base URL).
    * ``api_key``: sent as ``Authorization: Bearer``; default ``MEMMACHINE_API_KEY``.
    * ``user_id``, ``org_id``, ``project_id``, ``agent_id``, ``group_id``: default ids for
      every call (a call's own ids win).
    * ``timeout``: seconds or an ``httpx.Timeout``; ``None`` means :data:`DEFAULT_TIMEOUT`
      (or the injected client's own). A timeout raises ``MemMachineTimeoutError``.
    * ``max_retries`` / ``retry``: see :class:`RetryPolicy` for what is retried, when and
      how long the client waits; the last failure is raised as a typed error.
    * ``http_client`` / ``transport``: an ``httpx.Client`` to send with (not closed by
      this client), or a transport for the client this one creates.

    Errors are :class:`memmachine_sdk.errors.MemMachineError` subclasses.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        user_id: str | None = None,
        org_id: str | None = None,
        project_id: str | None = None,
        agent_id: str | None = None,
        group_id: str | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int = 2,
        retry: RetryPolicy | None = None,
        http_client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        injected = str(http_client.base_url) if http_client is not None else ""
        super().__init__(
            base_url,
            api_key=api_key,
            ids={
                "user_id": user_id,
                "org_id": org_id,
                "project_id": project_id,
                "agent_id": agent_id,
                "group_id": group_id,
            },
            max_retries=max_retries,
            retry=retry,
            injected_url=injected or None,
        )
        self._owns_http = http_client is None
        if http_client is None:
            http_client = httpx.Client(
                timeout=DEFAULT_TIMEOUT if timeout is None else timeout, transport=transport
            )
        elif timeout is not None:
            self._timeout = httpx.Timeout(timeout)
        self._http = http_client

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections this client opened (an injected client stays open)."""
        if self._owns_http:
            self._http.close()

    def memory(
        self,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        agent_id: str | None = None,
        group_id: str | None = None,
        org_id: str | None = None,
        project_id: str | None = None,
    ) -> Memory:
        """A handle on one user's memory (one session's, with ``session_id``); ids not
        given fall back to the client's. A missing or malformed id raises
        ``InvalidInputError`` naming it, before anything is sent."""
        ids = self._scope_ids(
            user_id=user_id,
            agent_id=agent_id,
            group_id=group_id,
            org_id=org_id,
            project_id=project_id,
        )
        return Memory(self, ids, session_id)

    def _send(self, call: Call[T]) -> T | None:
        retry = 0
        while True:
            error: MemMachineError
            try:
                response = self._http.request(**self._request_args(call))
            except httpx.TransportError as exc:
                error = connection_error(exc, self.base_url)
                cause: BaseException | None = exc
            else:
                if response.status_code < 400:
                    return self._parse(call, response)
                error, cause = self._error(response), None
            delay = self._retry_delay(call, error, retry)
            if delay is None:
                raise error from cause
            time.sleep(delay)
            retry += 1

    def _get(self, call: Call[T]) -> T:
        result = self._send(call)
        assert result is not None
        return result

    def health(self) -> m.HealthResponse:
        """Liveness, each store's state and the search mode (hybrid or lexical-only)."""
        return self._get(self._calls.health())

    def add(
        self,
        messages: Sequence[MessageLike],
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        working: bool = True,
        idempotency_key: str | None = None,
    ) -> m.AddMemoriesResponse:
        """Store messages (strings, dicts or MessageIn) as episodes of a session, in order,
        and with ``working`` in its working memory too; all or nothing.

        Retried after 429, 503 and refused connections, never after a timeout or 502/504
        (such an error leaves it open whether they were stored). Every attempt carries the
        call's ``Idempotency-Key`` (``idempotency_key``, or a fresh one per call): the
        server stores the messages once and answers a repeat with the first answer. To
        repeat an add yourself after a timeout or 504, pass the same ``idempotency_key``
        again: it is stored once either way."""
        call = self._calls.add(
            messages,
            user_id=user_id,
            session_id=session_id,
            working=working,
            idempotency_key=idempotency_key,
        )
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
        explain: bool = False,
        stages_off: Sequence[str] = (),
    ) -> m.SearchResponse:
        """Episodes, profile facts and (with ``session_id``) that session's working memory
        relevant to ``query``. Retried like any read.

        ``stages_off`` skips retrieval stages in this search only (``neighbourhood``,
        ``speaker_boost``...; ``explain`` lists them all); with ``explain`` the response's
        ``explain.stages`` has each stage's time, and each episode's ``explain`` the
        signals that found it and how each stage moved it."""
        call = self._calls.search(
            query,
            user_id=user_id,
            session_id=session_id,
            top_k=top_k,
            types=types,
            expand_context=expand_context,
            explain=explain,
            stages_off=stages_off,
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
        """A page of the user's episodes (of one session with ``session_id``), oldest first."""
        call = self._calls.list_episodes(
            user_id=user_id,
            session_id=session_id,
            limit=limit,
            offset=offset,
            newest_first=newest_first,
        )
        return self._get(call)

    def get_episode(self, episode_id: str, *, user_id: str | None = None) -> m.EpisodeOut:
        """One episode by id (``NotFoundError`` when the user has none with that id)."""
        return self._get(self._calls.get_episode(episode_id, user_id=user_id))

    def delete_episode(self, episode_id: str, *, user_id: str | None = None) -> None:
        """Delete one episode (``NotFoundError`` when it does not exist, e.g. already deleted)."""
        self._send(self._calls.delete_episode(episode_id, user_id=user_id))

    def upload_attachment(
        self,
        data: bytes,
        *,
        filename: str,
        mime: str | None = None,
        caption: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        working: bool = True,
    ) -> m.AddMemoriesResponse:
        """Upload an image, recording or document to a session: the server stores it,
        describes it (``caption``, a plain document's text or its model) and indexes the
        description as an episode. Inline data URIs go through :meth:`add` instead."""
        call = self._calls.upload_attachment(
            data,
            filename=filename,
            mime=mime,
            caption=caption,
            user_id=user_id,
            session_id=session_id,
            working=working,
        )
        return self._get(call)

    def download_attachment(
        self, episode_id: str, *, user_id: str | None = None
    ) -> m.AttachmentDownload:
        """The bytes of the attachment an episode describes (``NotFoundError`` if none)."""
        return self._get(self._calls.download_attachment(episode_id, user_id=user_id))

    def set_profile(
        self,
        facts: Sequence[FactLike],
        *,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> list[m.FactOut]:
        """Upsert facts, one value per ``(tag, feature)``; an old value goes to its history."""
        call = self._calls.set_profile(facts, user_id=user_id, session_id=session_id)
        return self._get(call).facts

    def get_profile(
        self,
        *,
        user_id: str | None = None,
        tag: str | None = None,
        feature: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[m.FactOut]:
        """The user's current facts, all or those with ``tag`` (and ``feature``), ordered by
        tag and feature; ``limit`` / ``offset`` page them (the server's default page is
        1000 facts)."""
        call = self._calls.get_profile(
            user_id=user_id, tag=tag, feature=feature, limit=limit, offset=offset
        )
        return self._get(call).facts

    def profile_history(
        self, tag: str, feature: str, *, user_id: str | None = None
    ) -> m.ProfileHistoryResponse:
        """The current fact for (tag, feature) and its superseded / invalidated versions."""
        return self._get(self._calls.profile_history(tag, feature, user_id=user_id))

    def search_profile(
        self, query: str, *, user_id: str | None = None, top_k: int = 10
    ) -> list[m.FactOut]:
        """Facts relevant to ``query``, best first."""
        return self._get(self._calls.search_profile(query, user_id=user_id, top_k=top_k)).facts

    def get_fact(self, fact_id: str, *, user_id: str | None = None) -> m.FactOut:
        """One fact by id (``NotFoundError`` when the user has none with that id)."""
        return self._get(self._calls.get_fact(fact_id, user_id=user_id))

    def delete_fact(self, fact_id: str, *, user_id: str | None = None) -> None:
        """Delete one fact by id (``NotFoundError`` when it does not exist)."""
        self._send(self._calls.delete_fact(fact_id, user_id=user_id))

    def delete_facts(
        self, *, user_id: str | None = None, tag: str | None = None, feature: str | None = None
    ) -> int:
        """Delete the facts with ``tag`` (and ``feature``), or all; returns how many."""
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
        """Append messages to the session's working memory. Not retried after a timeout."""
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
        """Replace the given parts of the session's working memory; with ``expected_version``
        only if still at that version (``ConflictError`` with ``current_version`` if not)."""
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
        """Clear the session's working memory (episodes stay)."""
        self._send(self._calls.delete_working(session_id, user_id=user_id))

    def compact(
        self, session_id: str, *, user_id: str | None = None, wait: bool = False
    ) -> m.CompactResponse:
        """Compact the session's working memory: queue a job (``.job``), or with ``wait``
        run it now and return what it did (``.result``)."""
        return self._get(self._calls.compact(session_id, user_id=user_id, wait=wait))

    def forget_session(self, session_id: str, *, user_id: str | None = None) -> m.ForgetResponse:
        """Delete a session: its episodes, working memory and the facts sourced from it."""
        return self._get(self._calls.forget_session(session_id, user_id=user_id))

    def forget_user(self, user_id: str) -> m.ForgetResponse:
        """Delete everything stored for the user."""
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

    def memory_types(self) -> list[m.MemoryTypeOut]:
        """The server's custom memory types, with the JSON schemas of their input."""
        return self._get(self._calls.memory_types()).types

    def store_custom(
        self,
        name: str,
        input: BaseModel | Mapping[str, Any] | None = None,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        agent_id: str | None = None,
        group_id: str | None = None,
        expires_at: datetime | None = None,
        ttl_seconds: int | None = None,
    ) -> Any:
        """Run custom memory type ``name``'s ``store`` with ``input``; returns its result
        (JSON data). The records it writes expire at ``expires_at`` or after
        ``ttl_seconds`` when one is given. ``NotFoundError`` for an unknown type,
        ``InvalidInputError`` naming ``input.<field>`` for input the type refuses. Not
        retried after a timeout."""
        ids = {"agent_id": agent_id, "group_id": group_id}
        call = self._calls.custom(
            name,
            "store",
            input,
            expires_at=expires_at,
            ttl_seconds=ttl_seconds,
            user_id=user_id,
            session_id=session_id,
            **ids,
        )
        return self._get(call).result

    def retrieve_custom(
        self,
        name: str,
        input: BaseModel | Mapping[str, Any] | None = None,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        agent_id: str | None = None,
        group_id: str | None = None,
    ) -> Any:
        """Run custom memory type ``name``'s ``retrieve`` with ``input``; returns its result
        (JSON data). Retried like any read."""
        call = self._calls.custom(
            name,
            "retrieve",
            input,
            user_id=user_id,
            session_id=session_id,
            agent_id=agent_id,
            group_id=group_id,
        )
        return self._get(call).result

    # ------------------------------------------------------------- procedural memory

    def add_procedure(
        self,
        goal: str,
        steps: Sequence[str],
        *,
        preconditions: Sequence[str] = (),
        pitfalls: Sequence[str] = (),
        confidence: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        replaces: str | None = None,
        agent_id: str | None = None,
    ) -> m.ProcedureOut:
        """Remember how: a procedure every user of the application (org, project, agent)
        can reuse. One of the same goal (or ``replaces``) is superseded, its version kept.
        PII is redacted; an instruction to the model is an ``InvalidInputError``."""
        call = self._calls.add_procedure(
            goal,
            steps,
            agent_id=agent_id,
            preconditions=list(preconditions),
            pitfalls=list(pitfalls),
            confidence=confidence,
            metadata=None if metadata is None else dict(metadata),
            replaces=replaces,
        )
        return self._get(call)

    def list_procedures(
        self, *, agent_id: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[m.ProcedureOut]:
        """The application's procedures, most recently updated first."""
        call = self._calls.list_procedures(agent_id=agent_id, limit=limit, offset=offset)
        return self._get(call).procedures

    def search_procedures(
        self, query: str, *, agent_id: str | None = None, top_k: int = 5
    ) -> list[m.ProcedureHitOut]:
        """The application's procedures for the task ``query`` describes, best first."""
        call = self._calls.search_procedures(query, agent_id=agent_id, top_k=top_k)
        return self._get(call).hits

    def get_procedure(self, procedure_id: str, *, agent_id: str | None = None) -> m.ProcedureOut:
        """One procedure (``NotFoundError`` when the application has none such)."""
        return self._get(self._calls.get_procedure(procedure_id, agent_id=agent_id))

    def procedure_history(
        self, procedure_id: str, *, agent_id: str | None = None
    ) -> m.ProcedureHistoryResponse:
        """A procedure and the versions it superseded, oldest first."""
        return self._get(self._calls.procedure_history(procedure_id, agent_id=agent_id))

    def report_procedure_use(
        self, procedure_id: str, *, success: bool, agent_id: str | None = None
    ) -> m.ProcedureOut:
        """Report whether reusing a procedure worked: its confidence rises or falls."""
        call = self._calls.report_procedure_use(procedure_id, success=success, agent_id=agent_id)
        return self._get(call)

    def delete_procedure(self, procedure_id: str, *, agent_id: str | None = None) -> None:
        """Delete a procedure and its history (``NotFoundError`` when there is none)."""
        self._send(self._calls.delete_procedure(procedure_id, agent_id=agent_id))

    def set_session_outcome(
        self,
        session_id: str,
        outcome: Literal["success", "failure"],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> m.SessionOutcomeResponse:
        """Report how a session went; a success has the server distil its procedures."""
        call = self._calls.set_session_outcome(
            session_id, outcome, user_id=user_id, agent_id=agent_id
        )
        return self._get(call)


class AsyncClient(AsyncOperations, _Base):
    """Asyncio client with the same constructor and methods as :class:`Client`, awaited;
    ``http_client`` is an ``httpx.AsyncClient`` and ``transport`` an async transport
    (``httpx.ASGITransport(app)`` to talk to an app in-process)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        user_id: str | None = None,
        org_id: str | None = None,
        project_id: str | None = None,
        agent_id: str | None = None,
        group_id: str | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int = 2,
        retry: RetryPolicy | None = None,
        http_client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        injected = str(http_client.base_url) if http_client is not None else ""
        super().__init__(
            base_url,
            api_key=api_key,
            ids={
                "user_id": user_id,
                "org_id": org_id,
                "project_id": project_id,
                "agent_id": agent_id,
                "group_id": group_id,
            },
            max_retries=max_retries,
            retry=retry,
            injected_url=injected or None,
        )
        self._owns_http = http_client is None
        if http_client is None:
            http_client = httpx.AsyncClient(
                timeout=DEFAULT_TIMEOUT if timeout is None else timeout, transport=transport
            )
        elif timeout is not None:
            self._timeout = httpx.Timeout(timeout)
        self._http = http_client

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections this client opened (an injected client stays open)."""
        if self._owns_http:
            await self._http.aclose()

    def memory(
        self,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        agent_id: str | None = None,
        group_id: str | None = None,
        org_id: str | None = None,
        project_id: str | None = None,
    ) -> AsyncMemory:
        """Like :meth:`Client.memory`, with awaitable methods."""
        ids = self._scope_ids(
            user_id=user_id,
            agent_id=agent_id,
            group_id=group_id,
            org_id=org_id,
            project_id=project_id,
        )
        return AsyncMemory(self, ids, session_id)

    async def _send(self, call: Call[T]) -> T | None:
        retry = 0
        while True:
            error: MemMachineError
            try:
                response = await self._http.request(**self._request_args(call))
            except httpx.TransportError as exc:
                error = connection_error(exc, self.base_url)
                cause: BaseException | None = exc
            else:
                if response.status_code < 400:
                    return self._parse(call, response)
                error, cause = self._error(response), None
            delay = self._retry_delay(call, error, retry)
            if delay is None:
                raise error from cause
            await asyncio.sleep(delay)
            retry += 1

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
        idempotency_key: str | None = None,
    ) -> m.AddMemoriesResponse:
        call = self._calls.add(
            messages,
            user_id=user_id,
            session_id=session_id,
            working=working,
            idempotency_key=idempotency_key,
        )
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
        explain: bool = False,
        stages_off: Sequence[str] = (),
    ) -> m.SearchResponse:
        call = self._calls.search(
            query,
            user_id=user_id,
            session_id=session_id,
            top_k=top_k,
            types=types,
            expand_context=expand_context,
            explain=explain,
            stages_off=stages_off,
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

    async def upload_attachment(
        self,
        data: bytes,
        *,
        filename: str,
        mime: str | None = None,
        caption: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        working: bool = True,
    ) -> m.AddMemoriesResponse:
        call = self._calls.upload_attachment(
            data,
            filename=filename,
            mime=mime,
            caption=caption,
            user_id=user_id,
            session_id=session_id,
            working=working,
        )
        return await self._get(call)

    async def download_attachment(
        self, episode_id: str, *, user_id: str | None = None
    ) -> m.AttachmentDownload:
        return await self._get(self._calls.download_attachment(episode_id, user_id=user_id))

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
        self,
        *,
        user_id: str | None = None,
        tag: str | None = None,
        feature: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[m.FactOut]:
        call = self._calls.get_profile(
            user_id=user_id, tag=tag, feature=feature, limit=limit, offset=offset
        )
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

    async def get_fact(self, fact_id: str, *, user_id: str | None = None) -> m.FactOut:
        return await self._get(self._calls.get_fact(fact_id, user_id=user_id))

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

    async def memory_types(self) -> list[m.MemoryTypeOut]:
        """The server's custom memory types, with the JSON schemas of their input."""
        return (await self._get(self._calls.memory_types())).types

    async def store_custom(
        self,
        name: str,
        input: BaseModel | Mapping[str, Any] | None = None,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        agent_id: str | None = None,
        group_id: str | None = None,
        expires_at: datetime | None = None,
        ttl_seconds: int | None = None,
    ) -> Any:
        """See :meth:`Client.store_custom`."""
        ids = {"agent_id": agent_id, "group_id": group_id}
        call = self._calls.custom(
            name,
            "store",
            input,
            expires_at=expires_at,
            ttl_seconds=ttl_seconds,
            user_id=user_id,
            session_id=session_id,
            **ids,
        )
        return (await self._get(call)).result

    async def retrieve_custom(
        self,
        name: str,
        input: BaseModel | Mapping[str, Any] | None = None,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        agent_id: str | None = None,
        group_id: str | None = None,
    ) -> Any:
        """See :meth:`Client.retrieve_custom`."""
        call = self._calls.custom(
            name,
            "retrieve",
            input,
            user_id=user_id,
            session_id=session_id,
            agent_id=agent_id,
            group_id=group_id,
        )
        return (await self._get(call)).result

    # ------------------------------------------------------------- procedural memory

    async def add_procedure(
        self,
        goal: str,
        steps: Sequence[str],
        *,
        preconditions: Sequence[str] = (),
        pitfalls: Sequence[str] = (),
        confidence: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        replaces: str | None = None,
        agent_id: str | None = None,
    ) -> m.ProcedureOut:
        """Remember how: a procedure every user of the application (org, project, agent)
        can reuse. One of the same goal (or ``replaces``) is superseded, its version kept.
        PII is redacted; an instruction to the model is an ``InvalidInputError``."""
        call = self._calls.add_procedure(
            goal,
            steps,
            agent_id=agent_id,
            preconditions=list(preconditions),
            pitfalls=list(pitfalls),
            confidence=confidence,
            metadata=None if metadata is None else dict(metadata),
            replaces=replaces,
        )
        return await self._get(call)

    async def list_procedures(
        self, *, agent_id: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[m.ProcedureOut]:
        """The application's procedures, most recently updated first."""
        call = self._calls.list_procedures(agent_id=agent_id, limit=limit, offset=offset)
        return (await self._get(call)).procedures

    async def search_procedures(
        self, query: str, *, agent_id: str | None = None, top_k: int = 5
    ) -> list[m.ProcedureHitOut]:
        """The application's procedures for the task ``query`` describes, best first."""
        call = self._calls.search_procedures(query, agent_id=agent_id, top_k=top_k)
        return (await self._get(call)).hits

    async def get_procedure(
        self, procedure_id: str, *, agent_id: str | None = None
    ) -> m.ProcedureOut:
        """One procedure (``NotFoundError`` when the application has none such)."""
        return await self._get(self._calls.get_procedure(procedure_id, agent_id=agent_id))

    async def procedure_history(
        self, procedure_id: str, *, agent_id: str | None = None
    ) -> m.ProcedureHistoryResponse:
        """A procedure and the versions it superseded, oldest first."""
        return await self._get(self._calls.procedure_history(procedure_id, agent_id=agent_id))

    async def report_procedure_use(
        self, procedure_id: str, *, success: bool, agent_id: str | None = None
    ) -> m.ProcedureOut:
        """Report whether reusing a procedure worked: its confidence rises or falls."""
        call = self._calls.report_procedure_use(procedure_id, success=success, agent_id=agent_id)
        return await self._get(call)

    async def delete_procedure(self, procedure_id: str, *, agent_id: str | None = None) -> None:
        """Delete a procedure and its history (``NotFoundError`` when there is none)."""
        await self._send(self._calls.delete_procedure(procedure_id, agent_id=agent_id))

    async def set_session_outcome(
        self,
        session_id: str,
        outcome: Literal["success", "failure"],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> m.SessionOutcomeResponse:
        """Report how a session went; a success has the server distil its procedures."""
        call = self._calls.set_session_outcome(
            session_id, outcome, user_id=user_id, agent_id=agent_id
        )
        return await self._get(call)


#: The names the client had before ``Client`` / ``AsyncClient``; same classes.
MemMachineClient = Client
AsyncMemMachineClient = AsyncClient


def _download_name(disposition: str) -> str | None:
    """The file name of a ``Content-Disposition: attachment; filename*=UTF-8''...`` header."""
    _, found, encoded = disposition.partition("filename*=UTF-8''")
    return unquote(encoded.split(";")[0]) if found and encoded else None
