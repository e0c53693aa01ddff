"""What each client call sends and expects back, shared by the sync and async clients."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
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
    #: A multipart body (``name: (filename, bytes, type)``) with ``form`` fields, for uploads.
    files: dict[str, Any] | None = None
    form: dict[str, Any] | None = None
    #: The response is bytes (``AttachmentDownload``), not JSON.
    raw: bool = False

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
        explain: bool = False,
        stages_off: Sequence[str] = (),
        **ids: str | None,
    ) -> Call[m.SearchResponse]:
        request = validate(
            m.SearchRequest,
            query=query,
            top_k=top_k,
            expand_context=expand_context,
            explain=explain,
            stages_off=list(stages_off),
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

    def upload_attachment(
        self,
        data: bytes,
        *,
        filename: str,
        mime: str | None,
        caption: str | None,
        user_id: str | None,
        session_id: str | None,
        working: bool,
    ) -> Call[m.AddMemoriesResponse]:
        params = self._scope(user_id=user_id, session_id=session_id)
        form = _params(caption=caption, working=str(working).lower())
        files = {"file": (filename, data, mime or "application/octet-stream")}
        return Call(
            "POST",
            "/v1/memories/attachments",
            m.AddMemoriesResponse,
            params=params,
            files=files,
            form=form,
        )

    def download_attachment(
        self, episode_id: str, *, user_id: str | None
    ) -> Call[m.AttachmentDownload]:
        path = f"/v1/memories/{_seg(episode_id)}/attachment"
        params = self._scope(user_id=user_id)
        return Call("GET", path, m.AttachmentDownload, params=params, raw=True)

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
        *,
        expires_at: datetime | None = None,
        ttl_seconds: int | None = None,
        **ids: str | None,
    ) -> Call[m.CustomMemoryResponse]:
        """A call of custom memory type ``name``; ``input`` (a pydantic model or a mapping)
        is sent as JSON and validated by the server against the type's model. A store's
        records expire at ``expires_at`` or after ``ttl_seconds`` when one is given."""
        if isinstance(input, BaseModel):
            data: Any = input.model_dump(mode="json")
        else:
            data = {} if input is None else dict(input)
        request: m.CustomMemoryRequest
        if action == "store":
            expiry = {"expires_at": expires_at, "ttl_seconds": ttl_seconds}
            request = validate(m.CustomStoreRequest, input=data, **expiry, **self._scope(**ids))
        else:
            request = validate(m.CustomMemoryRequest, input=data, **self._scope(**ids))
        path = f"/v1/memory-types/{_seg(name)}/{action}"
        # A retrieve only reads; a store may not be repeatable (the type decides).
        safe = action == "retrieve"
        return Call("POST", path, m.CustomMemoryResponse, json=_body(request), idempotent=safe)

    # ------------------------------------------------------------ facts, jobs, keys, inspector

    def invalidate_fact(
        self, fact_id: str, *, reason: str | None, user_id: str | None
    ) -> Call[m.ProfileHistoryResponse]:
        fields: dict[str, Any] = self._scope(user_id=user_id)
        if reason is not None:
            fields["reason"] = reason
        request = validate(m.InvalidateFactRequest, **fields)
        path = f"/v1/profile/facts/{_seg(fact_id)}/invalidate"
        # Closing a fact twice closes it once: the second call answers with the same history.
        return Call("POST", path, m.ProfileHistoryResponse, json=_body(request), idempotent=True)

    def list_jobs(
        self, *, user_id: str | None, status: str | None, limit: int
    ) -> Call[m.JobListResponse]:
        params = _params(**self._scope(user_id=user_id), status=status, limit=limit)
        return Call("GET", "/v1/jobs", m.JobListResponse, params=params)

    def get_job(self, job_id: str, *, user_id: str | None) -> Call[m.JobOut]:
        params = self._scope(user_id=user_id)
        return Call("GET", f"/v1/jobs/{_seg(job_id)}", m.JobOut, params=params)

    def replay_job(self, job_id: str, *, user_id: str | None) -> Call[m.JobOut]:
        # A second replay of a job already requeued is a 409, so it is not retried blindly.
        params = self._scope(user_id=user_id)
        return Call("POST", f"/v1/jobs/{_seg(job_id)}/replay", m.JobOut, params=params)

    def purge_dead_jobs(
        self, *, job_id: str | None, user_id: str | None
    ) -> Call[m.JobPurgeResponse]:
        params = _params(**self._scope(user_id=user_id), job_id=job_id)
        return Call("DELETE", "/v1/jobs/dead", m.JobPurgeResponse, params=params)

    def create_key(
        self,
        *,
        tenant: str | None,
        name: str,
        permissions: Sequence[str] | None,
        rate_limit_per_minute: int | None,
    ) -> Call[m.CreatedKeyOut]:
        fields: dict[str, Any] = {"name": name}
        if tenant is not None:
            fields["tenant"] = tenant
        if permissions is not None:
            fields["permissions"] = list(permissions)
        if rate_limit_per_minute is not None:
            fields["rate_limit_per_minute"] = rate_limit_per_minute
        request = validate(m.CreateKeyRequest, **fields)
        return Call("POST", "/v1/admin/keys", m.CreatedKeyOut, json=_body(request))

    def list_keys(self, *, tenant: str | None) -> Call[m.ApiKeyListResponse]:
        return Call("GET", "/v1/admin/keys", m.ApiKeyListResponse, params=_params(tenant=tenant))

    def revoke_key(self, key_id: str) -> Call[m.ApiKeyOut]:
        return Call("DELETE", f"/v1/admin/keys/{_seg(key_id)}", m.ApiKeyOut)

    def get_retention(self) -> Call[m.RetentionResponse]:
        return Call("GET", "/v1/admin/retention", m.RetentionResponse)

    def set_retention(
        self, policies: Sequence[m.RetentionPolicyIn | Mapping[str, Any]]
    ) -> Call[m.RetentionResponse]:
        items = [p if isinstance(p, m.RetentionPolicyIn) else dict(p) for p in policies]
        request = validate(m.RetentionPoliciesRequest, policies=items)
        # Replacing the policies with the same list twice leaves the same policies.
        return Call(
            "PUT", "/v1/admin/retention", m.RetentionResponse, json=_body(request), idempotent=True
        )

    def run_retention_sweep(self) -> Call[m.RetentionReportOut]:
        return Call("POST", "/v1/admin/retention/sweep", m.RetentionReportOut)

    def whoami(self) -> Call[m.WhoAmIResponse]:
        return Call("GET", "/v1/whoami", m.WhoAmIResponse)

    def _project(self) -> dict[str, str]:
        return {key: value for key, value in self.ids.items() if key in ("org_id", "project_id")}

    def _user_path_scope(self, **ids: str | None) -> dict[str, str]:
        """Scope ids for a route with the user in its path (the user id is not repeated)."""
        return {key: value for key, value in self._scope(**ids).items() if key != "user_id"}

    def list_users(
        self, *, prefix: str | None, after: str | None, limit: int
    ) -> Call[m.UserListResponse]:
        params = _params(**self._project(), prefix=prefix, after=after, limit=limit)
        return Call("GET", "/v1/users", m.UserListResponse, params=params)

    def get_user(self, user_id: str) -> Call[m.UserOut]:
        params = self._user_path_scope()
        return Call("GET", f"/v1/users/{_seg(user_id)}", m.UserOut, params=params)

    def list_sessions(
        self, user_id: str, *, limit: int, offset: int
    ) -> Call[m.SessionListResponse]:
        params = {**self._user_path_scope(), "limit": limit, "offset": offset}
        path = f"/v1/users/{_seg(user_id)}/sessions"
        return Call("GET", path, m.SessionListResponse, params=params)

    def timeline(
        self, user_id: str, *, session_id: str | None, bucket_seconds: int
    ) -> Call[m.TimelineResponse]:
        params = {**self._user_path_scope(session_id=session_id), "bucket_seconds": bucket_seconds}
        path = f"/v1/users/{_seg(user_id)}/timeline"
        return Call("GET", path, m.TimelineResponse, params=params)

    def forget_preview(self, user_id: str, *, session_id: str | None) -> Call[m.ForgetPreviewOut]:
        params = self._user_path_scope(session_id=session_id)
        path = f"/v1/users/{_seg(user_id)}/forget-preview"
        return Call("GET", path, m.ForgetPreviewOut, params=params)

    def job_counts(self, user_id: str) -> Call[m.JobCountsOut]:
        params = self._user_path_scope()
        path = f"/v1/users/{_seg(user_id)}/job-counts"
        return Call("GET", path, m.JobCountsOut, params=params)

    def neighbours(
        self, episode_id: str, *, user_id: str | None, before: int, after: int
    ) -> Call[m.EpisodeNeighboursResponse]:
        params = {**self._scope(user_id=user_id), "before": before, "after": after}
        path = f"/v1/memories/{_seg(episode_id)}/neighbours"
        return Call("GET", path, m.EpisodeNeighboursResponse, params=params)

    # ------------------------------------------------------------- procedural memory

    def _app(self, agent_id: str | None) -> dict[str, str]:
        """The application's ids (org, project, agent): procedures belong to no user."""
        scope = self._scope(agent_id=agent_id)
        return {k: v for k, v in scope.items() if k in ("org_id", "project_id", "agent_id")}

    def add_procedure(
        self, goal: str, steps: Sequence[str], *, agent_id: str | None, **fields: Any
    ) -> Call[m.ProcedureOut]:
        fields = {key: value for key, value in fields.items() if value is not None}
        request = validate(
            m.ProcedureIn, goal=goal, steps=list(steps), **fields, **self._app(agent_id)
        )
        return Call("POST", "/v1/procedures", m.ProcedureOut, json=_body(request))

    def list_procedures(
        self, *, agent_id: str | None, limit: int, offset: int
    ) -> Call[m.ProcedureListResponse]:
        params = {**self._app(agent_id), "limit": limit, "offset": offset}
        return Call("GET", "/v1/procedures", m.ProcedureListResponse, params=params)

    def search_procedures(
        self, query: str, *, agent_id: str | None, top_k: int
    ) -> Call[m.ProcedureSearchResponse]:
        request = validate(
            m.ProcedureSearchRequest, query=query, top_k=top_k, **self._app(agent_id)
        )
        path = "/v1/procedures/search"
        return Call("POST", path, m.ProcedureSearchResponse, json=_body(request), idempotent=True)

    def get_procedure(self, procedure_id: str, *, agent_id: str | None) -> Call[m.ProcedureOut]:
        path = f"/v1/procedures/{_seg(procedure_id)}"
        return Call("GET", path, m.ProcedureOut, params=self._app(agent_id))

    def procedure_history(
        self, procedure_id: str, *, agent_id: str | None
    ) -> Call[m.ProcedureHistoryResponse]:
        path = f"/v1/procedures/{_seg(procedure_id)}/history"
        return Call("GET", path, m.ProcedureHistoryResponse, params=self._app(agent_id))

    def report_procedure_use(
        self, procedure_id: str, *, success: bool, agent_id: str | None
    ) -> Call[m.ProcedureOut]:
        request = validate(m.ProcedureUseRequest, success=success, **self._app(agent_id))
        path = f"/v1/procedures/{_seg(procedure_id)}/uses"
        return Call("POST", path, m.ProcedureOut, json=_body(request))

    def delete_procedure(self, procedure_id: str, *, agent_id: str | None) -> Call[BaseModel]:
        path = f"/v1/procedures/{_seg(procedure_id)}"
        return Call("DELETE", path, None, params=self._app(agent_id))

    def set_session_outcome(
        self, session_id: str, outcome: str, *, user_id: str | None, agent_id: str | None
    ) -> Call[m.SessionOutcomeResponse]:
        scope = self._scope(user_id=user_id, agent_id=agent_id)
        scope.pop("session_id", None)
        request = validate(m.SessionOutcomeRequest, outcome=outcome, **scope)
        path = f"/v1/sessions/{_seg(session_id)}/outcome"
        return Call("POST", path, m.SessionOutcomeResponse, json=_body(request), idempotent=True)
