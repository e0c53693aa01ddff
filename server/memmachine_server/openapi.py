"""What ``/openapi.json`` says beyond the route signatures, so that it tells the truth.

FastAPI documents what a route declares. The server reads some of its inputs from the raw
request instead (the scope ids, the API key) and sends every error as
``{"error": {"code", "message", "field"?}}`` rather than FastAPI's own validation shape.
This module declares those inputs and outputs; it changes no behaviour:

* :func:`scope_parameters` declares the ``user_id``, ``session_id``... query parameters and
  ``X-User-ID``, ``X-Session-ID``... headers that :func:`memmachine_server.scope.resolve_scope`
  reads (it still reads and validates them itself);
* :func:`errors` documents error statuses with the real body schema (:class:`ErrorBody`);
* :func:`openapi_document` adds request and response examples and drops FastAPI's generic
  validation-error schema, which the server never sends.

Operation ids are the route functions' names (``add_memories``, ``search_memories``...).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI, Header, Query
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from memmachine_sdk.models import ID_PATTERN, ErrorBody
from memmachine_server.scope import SCOPE_HEADERS

__all__ = [
    "AUTH_ERRORS",
    "errors",
    "openapi_document",
    "operation_id",
    "scope_parameters",
]

_ID_MEANING = {
    "user_id": "The user whose memory this is (required: in the body, the query or X-User-ID).",
    "session_id": "The session (conversation).",
    "agent_id": "The agent acting for the user.",
    "group_id": "A group the memory is shared in.",
    "org_id": "The organisation (default `default`).",
    "project_id": "The project (default `default`).",
}


def operation_id(route: APIRoute) -> str:
    """A route's operationId: its function's name (``add_memories``)."""
    return route.name


def scope_parameters(*, path: str | None = None, only: tuple[str, ...] | None = None) -> Any:
    """A dependency declaring the scope ids as optional query parameters and ``X-*``
    headers, except ``path`` (an id the route takes from its path, which wins over both);
    ``only`` narrows them to the ids the route reads (``org_id`` and ``project_id`` for a
    route over a whole project).

    It only declares them: the values are read, in the documented order, and validated by
    :func:`memmachine_server.scope.resolve_scope`, so the errors stay the same."""
    parameters: list[inspect.Parameter] = []
    for name, header in SCOPE_HEADERS.items():
        if name == path or (only is not None and name not in only):
            continue
        parameters.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=str | None,
                default=Query(
                    None,
                    description=f"{_ID_MEANING[name]} Used when the body has none.",
                    json_schema_extra={"pattern": ID_PATTERN},
                ),
            )
        )
        parameters.append(
            inspect.Parameter(
                f"header_{name}",
                inspect.Parameter.KEYWORD_ONLY,
                annotation=str | None,
                default=Header(
                    None,
                    alias=header,
                    description=f"`{name}` when neither the body nor the query string has it.",
                    json_schema_extra={"pattern": ID_PATTERN},
                ),
            )
        )

    def declared(**ids: str | None) -> None:
        """Declaration only; resolve_scope reads the ids."""

    declared.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return Depends(declared)


# ----------------------------------------------------------------------------- errors

_ERRORS: dict[int, tuple[str, dict[str, Any]]] = {
    401: (
        "No API key where one is required, or a key nobody issued or one revoked.",
        {"code": "unauthenticated", "message": "unknown or revoked API key"},
    ),
    403: (
        "The API key is valid but may not do this (a read-only key writing, a key "
        "without admin managing keys).",
        {
            "code": "permission_denied",
            "message": "this API key may not write or delete memories (no write permission)",
        },
    ),
    404: (
        "Nothing with this id in the caller's scope (another user's is not found either).",
        {"code": "not_found", "message": "episode 'e-0b7c2a' not found"},
    ),
    409: (
        "A conflicting write: a stale `expected_version` (`current_version` says the "
        "version now) or a job that is not dead.",
        {
            "code": "conflict",
            "message": "working memory is at version 3, not 2",
            "current_version": 3,
        },
    ),
    413: (
        "The request body, a message, the state or the batch is over the server's limits.",
        {
            "code": "payload_too_large",
            "message": "message 0 has 40000 characters; the limit is 32000",
            "field": "messages.0.content",
        },
    ),
    415: (
        "An attachment of a type the server does not accept.",
        {
            "code": "unsupported_media_type",
            "message": "attachment type 'image/tiff' is not accepted",
            "field": "messages.0.attachments.0.mime",
        },
    ),
    422: (
        "Invalid input; `field` is the dotted path of the first bad field and `errors` "
        "lists every problem found.",
        {
            "code": "invalid_input",
            "message": "user_id is required (in the body, the query or the X-User-ID header)",
            "field": "user_id",
        },
    ),
    429: (
        "The API key is over its rate limit; `Retry-After` says how many seconds to wait.",
        {"code": "rate_limited", "message": "rate limit of 60 requests per minute exceeded"},
    ),
    500: (
        "The server failed unexpectedly; the body never carries internals.",
        {"code": "internal_error", "message": "internal error"},
    ),
    503: (
        "A store behind the server (or the job queue, or the key store) is unavailable; "
        "the request changed nothing.",
        {"code": "store_unavailable", "message": "the episodic store is unavailable"},
    ),
}

_HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": "`Bearer`: send the key as `Authorization: Bearer <key>`.",
            "schema": {"type": "string"},
        }
    },
    429: {
        "Retry-After": {
            "description": "Seconds to wait before trying again.",
            "schema": {"type": "integer"},
        }
    },
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI responses for error ``statuses``: the :class:`ErrorBody` schema, what the
    status means here and an example body."""
    responses: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        description, example = _ERRORS[status]
        response: dict[str, Any] = {
            "model": ErrorBody,
            "description": description,
            "content": {"application/json": {"example": {"error": example}}},
        }
        if status in _HEADERS:
            response["headers"] = _HEADERS[status]
        responses[status] = response
    return responses


#: What any /v1 route may answer whatever it does: a missing or unknown key, a key over
#: its rate limit, a key store or memory store that is down, an unexpected failure.
AUTH_ERRORS = errors(401, 429, 500, 503)


# ----------------------------------------------------------------------------- examples

_SCOPE = {"user_id": "ana", "session_id": "vet-visit"}
#: The ids an episode or a job is answered with.
_SCOPE_OUT = {
    "user_id": "ana",
    "session_id": "vet-visit",
    "agent_id": None,
    "group_id": None,
    "org_id": "default",
    "project_id": "default",
}
_EPISODE = {
    "id": "0f8c2d9e6b1a4c3e",
    "content": "My beagle Toast sees the vet on Thursday",
    "role": "user",
    "producer": "Ana",
    "timestamp": "2026-05-04T09:30:00Z",
    "sequence": 0,
    **_SCOPE_OUT,
    "metadata": {"channel": "sms"},
    "created_at": "2026-05-04T09:30:01Z",
    "score": None,
    "ranks": None,
    "context": False,
    "explain": None,
}
_HIT = {**_EPISODE, "score": 0.92, "ranks": {"dense": 1, "bm25": 1}}
#: A hit of a search with ``explain``, and the stages of that search.
_EXPLAINED_HIT = {
    **_HIT,
    "ranks": {"vector": 1, "fulltext": 2},
    "explain": {
        "sources": ["dense", "lexical"],
        "entered": "fusion",
        "steps": [
            {
                "stage": "fusion",
                "rank_before": None,
                "rank_after": 1,
                "score_before": None,
                "score_after": 0.9167,
                "boost": None,
            },
            {
                "stage": "ranking",
                "rank_before": 1,
                "rank_after": 1,
                "score_before": 0.9167,
                "score_after": 0.92,
                "boost": None,
            },
        ],
    },
}
_EXPLAINED_STAGES = [
    {
        "name": name,
        "ran": ran,
        "switched_off": off,
        "seconds": seconds,
        "switchable": name not in {"embed_query", "candidates", "fusion", "ranking"},
    }
    for name, ran, off, seconds in [
        ("embed_query", True, False, 0.0061),
        ("candidates", True, False, 0.0048),
        ("fusion", True, False, 0.0001),
        ("speaker_boost", False, True, 0.0),
        ("neighbourhood", True, False, 0.0011),
        ("ranking", True, False, 0.0001),
        ("expansion", False, False, 0.0),
    ]
]
_FACT = {
    "id": "7d1e0c5b9a2f4e68",
    "user_id": "ana",
    "tag": "pets",
    "feature": "dog",
    "value": "beagle named Toast",
    "confidence": 1.0,
    "effective_confidence": 1.0,
    "source": "user-explicit",
    "source_session_id": "vet-visit",
    "agent_id": None,
    "group_id": None,
    "metadata": {},
    "created_at": "2026-05-04T09:30:02Z",
    "updated_at": "2026-05-04T09:30:02Z",
    "source_episode_ids": [],
    "valid_from": "2026-05-04T09:30:02Z",
    "score": None,
}
_WORKING = {
    "user_id": "ana",
    "session_id": "vet-visit",
    "messages": [
        {
            "role": "user",
            "content": "My beagle Toast sees the vet on Thursday",
            "producer": "Ana",
            "timestamp": "2026-05-04T09:30:00Z",
            "metadata": {},
        }
    ],
    "message_count": 1,
    "first_index": 0,
    "state": {"reminder": "Wednesday 19:00"},
    "summary": None,
    "version": 2,
    "ttl_seconds": 86400,
    "updated_at": "2026-05-04T09:31:00Z",
}
_PROCEDURE = {
    "id": "3e573a61-efc0-4589-a812-ea7d26422afb",
    "org_id": "default",
    "project_id": "default",
    "agent_id": "support-bot",
    "goal": "Reset a forgotten password",
    "steps": ["Confirm the email on file", "Send a reset link"],
    "preconditions": [],
    "pitfalls": ["Links expire after 15 minutes"],
    "confidence": 0.6,
    "source": "explicit",
    "source_session_ids": [],
    "successes": 0,
    "failures": 0,
    "version": 1,
    "metadata": {},
    "created_at": "2026-05-04T09:31:00Z",
    "updated_at": "2026-05-04T09:31:00Z",
}
_JOB = {
    "id": "job-3c9a",
    "kind": "compact",
    "status": "queued",
    **_SCOPE_OUT,
    "idempotency_key": "compact:vet-visit:5e2f",
    "payload": {"force": True},
    "attempts": 0,
    "max_attempts": 5,
    "last_error": None,
    "created_at": "2026-05-04T09:32:00Z",
    "updated_at": "2026-05-04T09:32:00Z",
    "available_at": "2026-05-04T09:32:00Z",
    "request_id": "9b2f4c1e7a0d4e6f",
}
_KEY = {
    "id": "3f9c0a7d2b1e4c55",
    "tenant": "acme",
    "name": "ci",
    "permissions": ["read", "write"],
    "rate_limit_per_minute": 120,
    "created_at": "2026-05-04T09:00:00Z",
    "revoked_at": None,
}
_HISTORY = {
    "current": {**_FACT, "value": "beagle named Toast, 3 years old"},
    "history": [
        {
            "fact_id": "7d1e0c5b9a2f4e68",
            "tag": "pets",
            "feature": "dog",
            "value": "beagle named Toast",
            "confidence": 1.0,
            "source": "user-explicit",
            "source_session_id": "vet-visit",
            "source_episode_ids": [],
            "valid_from": "2026-05-04T09:30:02Z",
            "valid_to": "2026-06-01T10:00:00Z",
            "reason": "superseded",
            "recorded_at": "2026-06-01T10:00:00Z",
            "expires_at": None,
        }
    ],
}
_FORGET = {"episodes_deleted": 2, "facts_deleted": 1, "sessions_deleted": 1}
_USER = {
    "user_id": "ana",
    "org_id": "default",
    "project_id": "default",
    "episodes": 17,
    "sessions": 2,
    "facts": 4,
    "working_sessions": 1,
    "last_active": "2026-05-06T18:02:00Z",
}
_TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "recall", "arguments": '{"query": "dog"}'},
}
_NOTES_INPUT = {"title": "Dune", "status": "reading"}

#: operationId → (request body example or None, success response example or None).
_SWEEP: dict[str, Any] = {
    "started_at": "2026-05-05T12:00:00Z",
    "finished_at": "2026-05-05T12:00:02Z",
    "users": 120,
    "episodes_expired": 3,
    "episodes_aged_out": 410,
    "facts_expired": 1,
    "facts_aged_out": 0,
    "working_sessions_aged_out": 2,
    "working_messages_removed": 3,
    "fact_sources_expired": 4,
    "fact_versions_expired": 1,
    "custom_records_expired": 0,
    "working_summaries_dropped": 1,
    "jobs_removed": 12,
}
_RETENTION: dict[str, Any] = {
    "sweep_interval_seconds": 60,
    "policies": [
        {
            "tenant": "acme",
            "org_id": None,
            "project_id": None,
            "agent_id": None,
            "episodes_max_age_days": 90,
            "facts_max_age_days": {},
            "working_max_age_days": None,
            "jobs_max_age_days": 30,
        }
    ],
    "last_sweep": _SWEEP,
}

EXAMPLES: dict[str, tuple[dict[str, Any] | None, Any]] = {
    "get_health": (
        None,
        {
            "status": "ok",
            "version": "0.1.0",
            "mode": "hybrid",
            "embedder": {
                "enabled": True,
                "model": "all-MiniLM-L6-v2",
                "dimensions": 384,
                "reason": None,
            },
            "stores": {
                name: {
                    "name": name,
                    "kind": kind,
                    "status": "ok",
                    "detail": None,
                    "version": version,
                    "latency_ms": latency,
                }
                for name, kind, version, latency in [
                    ("episodic", "neo4j", "5.26.0", 1.8),
                    ("profile", "postgresql", "16.4", 0.9),
                    ("working", "redis", "7.4.1", 0.3),
                ]
            },
            "reranker": {"enabled": False, "model": None, "reason": "no reranker model set"},
            "llm": {"enabled": False, "model": None, "reason": "no MEMMACHINE_LLM_MODEL"},
        },
    ),
    "add_memories": (
        {
            **_SCOPE,
            "messages": [
                {
                    "role": "user",
                    "producer": "Ana",
                    "content": "My beagle Toast sees the vet on Thursday",
                    "metadata": {"channel": "sms"},
                }
            ],
        },
        {"session_id": "vet-visit", "episode_ids": ["0f8c2d9e6b1a4c3e"], "repeated_ids": []},
    ),
    "list_memories": (None, {"episodes": [_EPISODE], "total": 1, "limit": 100, "offset": 0}),
    "search_memories": (
        {
            "user_id": "ana",
            "query": "when does the dog see the vet?",
            "top_k": 5,
            "stages_off": ["speaker_boost"],
            "explain": True,
        },
        {
            "episodic": [_EXPLAINED_HIT],
            "profile": [{**_FACT, "score": 0.41}],
            "working": None,
            "explain": {"stages": _EXPLAINED_STAGES},
        },
    ),
    "get_memory": (None, _EPISODE),
    "delete_memory": (None, None),
    "upload_attachment": (
        None,
        {"session_id": "vet-visit", "episode_ids": ["5b2e7c1d9a0f4e6b"], "repeated_ids": []},
    ),
    "download_attachment": (None, None),
    "set_profile": (
        {
            "user_id": "ana",
            "facts": [{"tag": "pets", "feature": "dog", "value": "beagle named Toast"}],
        },
        {"facts": [_FACT]},
    ),
    "get_profile": (None, {"facts": [_FACT]}),
    "delete_facts": (None, {"deleted": 1}),
    "get_profile_history": (None, _HISTORY),
    "invalidate_fact": (
        {"user_id": "ana", "reason": "Toast was rehomed"},
        {"current": None, "history": _HISTORY["history"]},
    ),
    "search_profile": (
        {"user_id": "ana", "query": "what pet does she have?", "top_k": 3},
        {"facts": [{**_FACT, "score": 0.63}]},
    ),
    "get_fact": (None, _FACT),
    "delete_fact": (None, None),
    "get_working": (None, _WORKING),
    "append_working": (
        {
            "user_id": "ana",
            "messages": [{"role": "assistant", "content": "I will remind you on Wednesday"}],
        },
        {**_WORKING, "message_count": 2, "version": 3},
    ),
    "put_working": (
        {"user_id": "ana", "state": {"reminder": "Wednesday 19:00"}, "expected_version": 1},
        _WORKING,
    ),
    "compact_working": (None, {"job": _JOB, "result": None}),
    "delete_working": (None, None),
    "forget_session": (None, _FORGET),
    "forget_user": (None, {"episodes_deleted": 14, "facts_deleted": 3, "sessions_deleted": 4}),
    "memory_prompt": (
        {**_SCOPE, "query": "What is my dog called?", "max_tokens": 1000, "format": "openai"},
        {
            "format": "openai",
            "messages": [
                {"role": "system", "content": "What you know about the user:\n- pets/dog: ..."},
                {"role": "user", "content": "What is my dog called?"},
            ],
            "system": "What you know about the user:\n- pets/dog: beagle named Toast",
            "body": {},
            "fact_ids": ["7d1e0c5b9a2f4e68"],
            "episode_ids": ["0f8c2d9e6b1a4c3e"],
            "procedure_ids": [],
            "message_count": 1,
            "summary_included": False,
            "token_count": 58,
            "tokenizer": "estimate",
            "max_tokens": 1000,
            "dropped": {},
        },
    ),
    "list_tools": (
        None,
        {
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "recall",
                        "description": "Search the user's memory.",
                        "strict": True,
                        "parameters": {
                            "type": "object",
                            "properties": {"query": {"type": "string"}},
                            "required": ["query"],
                            "additionalProperties": False,
                        },
                    },
                }
            ]
        },
    ),
    "execute_tool": (
        {"user_id": "ana", "tool_call": _TOOL_CALL},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"memories": []}'},
    ),
    "list_jobs": (None, {"jobs": [_JOB]}),
    "get_job": (None, _JOB),
    "replay_job": (None, _JOB),
    "purge_dead_jobs": (None, {"purged": 2}),
    "create_key": (
        {"tenant": "acme", "name": "ci", "permissions": ["read", "write"]},
        {**_KEY, "key": "mm_3f9c0a7d2b1e4c55_Jm2uYc9bQ4sVw8Zx"},
    ),
    "list_keys": (None, {"keys": [_KEY]}),
    "revoke_key": (None, {**_KEY, "revoked_at": "2026-05-05T12:00:00Z"}),
    "get_retention": (None, _RETENTION),
    "put_retention": ({"policies": _RETENTION["policies"]}, _RETENTION),
    "run_retention_sweep": (None, _SWEEP),
    "list_memory_types": (
        None,
        {
            "types": [
                {
                    "name": "reading_list",
                    "description": "Books the user is reading.",
                    "store_schema": {"type": "object"},
                    "retrieve_schema": {"type": "object"},
                    "partition_by": [],
                }
            ]
        },
    ),
    "store_custom": (
        {"user_id": "ana", "input": _NOTES_INPUT},
        {"type": "reading_list", "result": {"stored": True}},
    ),
    "retrieve_custom": (
        {"user_id": "ana", "input": {"status": "reading"}},
        {"type": "reading_list", "result": [_NOTES_INPUT]},
    ),
    "whoami": (
        None,
        {
            "tenant": "acme",
            "key_id": "3f9c0a7d2b1e4c55",
            "can_read": True,
            "can_write": False,
            "is_admin": False,
            "key_required": True,
        },
    ),
    "list_users": (None, {"users": [_USER], "next_after": "ana"}),
    "get_user": (None, _USER),
    "list_sessions": (
        None,
        {
            "sessions": [
                {
                    "session_id": "vet-visit",
                    "episodes": 14,
                    "first_at": "2026-05-04T09:30:00Z",
                    "last_at": "2026-05-04T09:41:00Z",
                    "updated_at": "2026-05-04T09:41:01Z",
                }
            ],
            "working": [
                {
                    "session_id": "vet-visit",
                    "message_count": 14,
                    "version": 15,
                    "summary": None,
                    "ttl_seconds": 86400,
                    "updated_at": "2026-05-04T09:41:01Z",
                }
            ],
            "limit": 50,
            "offset": 0,
        },
    ),
    "timeline": (
        None,
        {
            "bucket_seconds": 86400,
            "buckets": [
                {"start": "2026-05-04T00:00:00Z", "count": 14},
                {"start": "2026-05-06T00:00:00Z", "count": 3},
            ],
        },
    ),
    "forget_preview": (
        None,
        {
            "user_id": "ana",
            "session_id": None,
            "episodes": 17,
            "facts": 4,
            "sessions": 2,
            "working_sessions": 1,
        },
    ),
    "job_counts": (None, {"queued": 1, "running": 0, "done": 12, "dead": 1}),
    "neighbours": (
        None,
        {
            "episode": _EPISODE,
            "before": [
                {**_EPISODE, "id": "5b2e7a1c0d9f4e33", "sequence": 0},
            ],
            "after": [],
        },
    ),
    "add_procedure": (
        {
            "agent_id": "support-bot",
            "goal": "Reset a forgotten password",
            "steps": ["Confirm the email on file", "Send a reset link"],
            "pitfalls": ["Links expire after 15 minutes"],
        },
        _PROCEDURE,
    ),
    "list_procedures": (None, {"procedures": [_PROCEDURE]}),
    "search_procedures": (
        {"agent_id": "support-bot", "query": "customer cannot log in", "top_k": 3},
        {"hits": [{"procedure": _PROCEDURE, "score": 0.87}]},
    ),
    "get_procedure": (None, _PROCEDURE),
    "procedure_history": (
        None,
        {
            "current": {**_PROCEDURE, "version": 2},
            "history": [
                {
                    **{k: _PROCEDURE[k] for k in ("goal", "preconditions", "pitfalls", "source")},
                    "steps": ["Send a reset link"],
                    "confidence": 0.6,
                    "source_session_ids": ["vet-visit"],
                    "successes": 2,
                    "failures": 1,
                    "reason": "superseded",
                    "valid_from": "2026-05-01T10:00:00Z",
                    "valid_to": "2026-05-04T09:31:00Z",
                }
            ],
        },
    ),
    "report_procedure_use": (
        {"agent_id": "support-bot", "success": True},
        {**_PROCEDURE, "successes": 1, "confidence": 0.72},
    ),
    "delete_procedure": (None, None),
    "set_session_outcome": (
        {"user_id": "ana", "outcome": "success"},
        {
            "session_id": "vet-visit",
            "outcome": "success",
            "recorded_at": "2026-05-04T09:40:00Z",
            "job_id": "0c6a9f2e4d8b41f7",
        },
    ),
}


def _add_examples(document: dict[str, Any]) -> None:
    for path in document["paths"].values():
        for operation in path.values():
            request, response = EXAMPLES.get(operation["operationId"], (None, None))
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if request is not None and body is not None:
                body["example"] = request
            if response is None:
                continue
            for status, answer in operation["responses"].items():
                content = answer.get("content", {}).get("application/json")
                if status.startswith("2") and content is not None:
                    content["example"] = response


def _drop_generic_validation_errors(document: dict[str, Any]) -> None:
    """FastAPI adds a 422 with its own ``{"detail": [...]}`` schema to every route with
    parameters that did not declare one; the server never sends that shape (a route that
    can answer 422 declares it with :func:`errors`)."""
    generic = "#/components/schemas/HTTPValidationError"
    for path in document["paths"].values():
        for operation in path.values():
            answer = operation["responses"].get("422", {})
            schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
            if schema.get("$ref") == generic:
                del operation["responses"]["422"]
    schemas = document.get("components", {}).get("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)


_DESCRIPTION = """\
Working, episodic and profile memory for AI agents.

**Authentication.** Every `/v1` call sends `Authorization: Bearer <key>` (or `X-API-Key`);
`/health` is open. The key decides the tenant. A server with no key at all, on a loopback
address, serves without one (tenant `default`); `MEMMACHINE_AUTH` changes that.

**Scope.** Every call acts for one user: `user_id` (and `session_id`, `agent_id`,
`group_id`, `org_id`, `project_id`) come from the body, else the query string, else the
`X-User-ID`, `X-Session-ID`, `X-Agent-ID`, `X-Group-ID`, `X-Org-ID`, `X-Project-ID` headers.

**Errors** are `{"error": {"code", "message", "field"?}}` with the status saying what kind.
"""


def openapi_document(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """The app's ``openapi()``: FastAPI's document with the examples and without the
    generic validation schema, built once."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                description=_DESCRIPTION,
                routes=app.routes,
                tags=app.openapi_tags,
            )
            _drop_generic_validation_errors(document)
            _add_examples(document)
            app.openapi_schema = document
        return app.openapi_schema

    return build
