"""What each client call sends and expects back, shared by the sync and async clients."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, ValidationError

from memmachine_sdk import models as m
from memmachine_sdk.errors import InvalidInputError

T = TypeVar("T", bound=BaseModel)

MessageLike = m.MessageIn | dict[str, Any] | str
FactLike = m.FactIn | dict[str, Any]


__all__ = ["Call", "FactLike", "MessageLike", "Requests", "invalid", "validate"]

_SAFE_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE"})


@dataclass
class Call(Generic[T]):
    """One request and the model its response parses into (``None``: no body).

    ``idempotent`` says whether sending it twice has the effect of sending it once, which
    decides whether it is retried after an ambiguous failure (a timeout after sending);
    by default GET, PUT and DELETE are, POST is not. A call that is not gets an
    ``idempotency_key`` of its own, sent as the ``Idempotency-Key`` header on each of its
    attempts, so the server can tell a repeat from a new write."""

    method: str
    path: str
    response: type[T] | None
    json: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    idempotent: bool | None = None
    idempotency_key: str | None = None

    def __post_init__(self) -> None:
        if self.idempotent is None:
            self.idempotent = self.method in _SAFE_METHODS
        if not self.idempotent and self.idempotency_key is None:
            self.idempotency_key = uuid.uuid4().hex


def invalid(field: str, message: str) -> InvalidInputError:
    """The error for bad input found before sending, shaped like the server's 422."""
    return InvalidInputError(
        422,
        "invalid_input",
        f"{field}: {message}",
        {"error": {"code": "invalid_input", "message": message, "field": field}},
    )


def _seg(value: str) -> str:
    """``value`` as one URL path segment: ``/``, ``#``, ``?`` and the like are escaped."""
    return quote(value, safe="")


def _raw(value: BaseModel | dict[str, Any] | str) -> dict[str, Any] | BaseModel:
    """A message given as plain text becomes ``{"content": text}``; the rest is validated
    as part of the whole request, so error locations name the full path."""
    return {"content": value} if isinstance(value, str) else value


def validate(model: type[T], **fields: Any) -> T:
    """Validate a request before sending it; bad input raises the same error type (and
    names the same field) as the server would."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise invalid(".".join(str(part) for part in first["loc"]), first["msg"]) from None


def _body(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", exclude_none=True)


def _params(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


class Requests:
    """Builds calls; ``ids`` are the client's default scope ids (org, project, agent...)."""

    def __init__(self, ids: dict[str, str | None]) -> None:
        self.ids = {key: value for key, value in ids.items() if value is not None}

    def _scope(self, **ids: str | None) -> dict[str, str]:
        merged = dict(self.ids)
        merged.update({key: value for key, value in ids.items() if value is not None})
        return merged

    def health(self) -> Call[m.HealthResponse]:
        return Call("GET", "/health", m.HealthResponse)

    def add(
        self,
        messages: Sequence[MessageLike],
        *,
        user_id: str | None,
        session_id: str | None,
        working: bool,
        idempotency_key: str | None = None,
        **ids: str | None,
    ) -> Call[m.AddMemoriesResponse]:
        request = validate(
            m.AddMemoriesRequest,
            messages=[_raw(message) for message in messages],
            working=working,
            **self._scope(user_id=user_id, session_id=session_id, **ids),
        )
        return Call(
            "POST",
            "/v1/memories",
            m.AddMemoriesResponse,
            json=_body(request),
            idempotency_key=idempotency_key,
        )

    def search(
        self,
        query: str,
        *,
        user_id: str | None,
        session_id: str | None,
        top_k: int,
        types: Sequence[Literal["episodic", "profile", "working"]] | None,
        expand_context: int,
        **ids: str | None,
    ) -> Call[m.SearchResponse]:
        request = validate(
            m.SearchRequest,
            query=query,
            top_k=top_k,
            expand_context=expand_context,
            **({"types": list(types)} if types else {}),
            **self._scope(user_id=user_id, session_id=session_id, **ids),
        )
        return Call(
            "POST", "/v1/memories/search", m.SearchResponse, json=_body(request), idempotent=True
        )

    def list_episodes(
        self,
        *,
        user_id: str | None,
        session_id: str | None,
        limit: int,
        offset: int,
        newest_first: bool,
    ) -> Call[m.EpisodeListResponse]:
        params = _params(
            **self._scope(user_id=user_id, session_id=session_id),
            limit=limit,
            offset=offset,
            order="newest" if newest_first else "oldest",
        )
        return Call("GET", "/v1/memories", m.EpisodeListResponse, params=params)

    def get_episode(self, episode_id: str, *, user_id: str | None) -> Call[m.EpisodeOut]:
        params = self._scope(user_id=user_id)
        return Call("GET", f"/v1/memories/{_seg(episode_id)}", m.EpisodeOut, params=params)

    def delete_episode(self, episode_id: str, *, user_id: str | None) -> Call[BaseModel]:
        params = self._scope(user_id=user_id)
        return Call("DELETE", f"/v1/memories/{_seg(episode_id)}", None, params=params)

    def set_profile(
        self, facts: Sequence[FactLike], *, user_id: str | None, session_id: str | None
    ) -> Call[m.ProfileResponse]:
        request = validate(
            m.SetProfileRequest,
            facts=list(facts),
            **self._scope(user_id=user_id, session_id=session_id),
        )
        return Call("POST", "/v1/profile", m.ProfileResponse, json=_body(request))

    def get_profile(
        self,
        *,
        user_id: str | None,
        tag: str | None,
        feature: str | None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> Call[m.ProfileResponse]:
        params = _params(
            **self._scope(user_id=user_id), tag=tag, feature=feature, limit=limit, offset=offset
        )
        return Call("GET", "/v1/profile", m.ProfileResponse, params=params)

    def profile_history(
        self, tag: str, feature: str, *, user_id: str | None
    ) -> Call[m.ProfileHistoryResponse]:
        params = _params(**self._scope(user_id=user_id), tag=tag, feature=feature)
        return Call("GET", "/v1/profile/history", m.ProfileHistoryResponse, params=params)

    def search_profile(
        self, query: str, *, user_id: str | None, top_k: int
    ) -> Call[m.ProfileSearchResponse]:
        request = validate(
            m.ProfileSearchRequest, query=query, top_k=top_k, **self._scope(user_id=user_id)
        )
        path = "/v1/profile/search"
        return Call("POST", path, m.ProfileSearchResponse, json=_body(request), idempotent=True)

    def get_fact(self, fact_id: str, *, user_id: str | None) -> Call[m.FactOut]:
        params = self._scope(user_id=user_id)
        return Call("GET", f"/v1/profile/facts/{_seg(fact_id)}", m.FactOut, params=params)

    def delete_fact(self, fact_id: str, *, user_id: str | None) -> Call[BaseModel]:
        params = self._scope(user_id=user_id)
        return Call("DELETE", f"/v1/profile/facts/{_seg(fact_id)}", None, params=params)

    def delete_facts(
        self, *, user_id: str | None, tag: str | None, feature: str | None
    ) -> Call[m.DeletedResponse]:
        params = _params(**self._scope(user_id=user_id), tag=tag, feature=feature)
        return Call("DELETE", "/v1/profile", m.DeletedResponse, params=params)

    def get_working(
        self,
        session_id: str,
        *,
        user_id: str | None,
        last_n: int | None,
        offset: int | None = None,
        limit: int | None = None,
    ) -> Call[m.WorkingMemoryOut]:
        params = _params(**self._scope(user_id=user_id), last_n=last_n, offset=offset, limit=limit)
        path = f"/v1/sessions/{_seg(session_id)}/working"
        return Call("GET", path, m.WorkingMemoryOut, params=params)

    def append_working(
        self,
        session_id: str,
        messages: Sequence[m.WorkingMessageIn | dict[str, Any] | str],
        *,
        user_id: str | None,
    ) -> Call[m.WorkingMemoryOut]:
        request = validate(
            m.AppendWorkingRequest,
            messages=[_raw(message) for message in messages],
            **self._scope(user_id=user_id),
        )
        path = f"/v1/sessions/{_seg(session_id)}/working/messages"
        return Call("POST", path, m.WorkingMemoryOut, json=_body(request))

    def put_working(
        self,
        session_id: str,
        *,
        user_id: str | None,
        messages: Sequence[m.WorkingMessageIn | dict[str, Any] | str] | None,
        state: dict[str, Any] | None,
        summary: str | None,
        expected_version: int | None,
    ) -> Call[m.WorkingMemoryOut]:
        request = validate(
            m.PutWorkingRequest,
            messages=None if messages is None else [_raw(x) for x in messages],
            state=state,
            summary=summary,
            expected_version=expected_version,
            **self._scope(user_id=user_id),
        )
        path = f"/v1/sessions/{_seg(session_id)}/working"
        # A conditional write repeated after it succeeded would fail with a conflict.
        safe = expected_version is None
        return Call("PUT", path, m.WorkingMemoryOut, json=_body(request), idempotent=safe)

    def delete_working(self, session_id: str, *, user_id: str | None) -> Call[BaseModel]:
        params = self._scope(user_id=user_id)
        return Call("DELETE", f"/v1/sessions/{_seg(session_id)}/working", None, params=params)

    def compact(
        self, session_id: str, *, user_id: str | None, wait: bool
    ) -> Call[m.CompactResponse]:
        params: dict[str, Any] = self._scope(user_id=user_id)
        if wait:
            params["wait"] = "true"
        path = f"/v1/sessions/{_seg(session_id)}/compact"
        return Call("POST", path, m.CompactResponse, params=params)

    def forget_session(self, session_id: str, *, user_id: str | None) -> Call[m.ForgetResponse]:
        params = self._scope(user_id=user_id)
        return Call("DELETE", f"/v1/sessions/{_seg(session_id)}", m.ForgetResponse, params=params)

    def forget_user(self, user_id: str) -> Call[m.ForgetResponse]:
        params = {key: value for key, value in self.ids.items() if key != "user_id"}
        return Call("DELETE", f"/v1/users/{_seg(user_id)}", m.ForgetResponse, params=params)

    def memory_prompt(
        self,
        query: str,
        *,
        user_id: str | None,
        session_id: str | None,
        max_tokens: int,
        format: Literal["openai", "anthropic", "gemini"],
        top_k: int,
        recent_messages: int,
    ) -> Call[m.MemoryPromptResponse]:
        request = validate(
            m.MemoryPromptRequest,
            query=query,
            max_tokens=max_tokens,
            format=format,
            top_k=top_k,
            recent_messages=recent_messages,
            **self._scope(user_id=user_id, session_id=session_id),
        )
        path = "/v1/memory-prompt"
        return Call("POST", path, m.MemoryPromptResponse, json=_body(request), idempotent=True)

    def tools(self) -> Call[m.ToolsResponse]:
        return Call("GET", "/v1/tools", m.ToolsResponse)

    def execute_tool(
        self,
        tool_call: m.ToolCallIn | dict[str, Any],
        *,
        user_id: str | None,
        session_id: str | None,
    ) -> Call[m.ToolMessageOut]:
        request = validate(
            m.ToolCallRequest,
            tool_call=tool_call,
            **self._scope(user_id=user_id, session_id=session_id),
        )
        return Call("POST", "/v1/tools/execute", m.ToolMessageOut, json=_body(request))

    def memory_types(self) -> Call[m.MemoryTypesResponse]:
        return Call("GET", "/v1/memory-types", m.MemoryTypesResponse)

    def custom(
        self,
        name: str,
        action: Literal["store", "retrieve"],
        input: BaseModel | Mapping[str, Any] | None,
        **ids: str | None,
    ) -> Call[m.CustomMemoryResponse]:
        """A call of custom memory type ``name``; ``input`` (a pydantic model or a mapping)
        is sent as JSON and validated by the server against the type's model."""
        if isinstance(input, BaseModel):
            data: Any = input.model_dump(mode="json")
        else:
            data = {} if input is None else dict(input)
        request = validate(m.CustomMemoryRequest, input=data, **self._scope(**ids))
        path = f"/v1/memory-types/{_seg(name)}/{action}"
        # A retrieve only reads; a store may not be repeatable (the type decides).
        safe = action == "retrieve"
        return Call("POST", path, m.CustomMemoryResponse, json=_body(request), idempotent=safe)
