"""Memory as tools an agent calls itself: ``remember``, ``recall`` and ``forget``.

:func:`memory_tools` gives their definitions in OpenAI function-calling format, valid in
strict mode (every object closes with ``additionalProperties: false``; every property is
required, optional ones being nullable). :func:`execute_tool_call` runs one tool call the
model made, for one scope, and returns the ``tool`` message to send back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from memmachine.errors import InvalidInputError
from memmachine.manager import MemoryManager
from memmachine.models import MemoryType, NewMessage, Scope
from memmachine.pipeline.extraction import REMEMBER_TOOL_MARK

__all__ = ["RECALL_DEFAULT_TOP_K", "TOOL_NAMES", "execute_tool_call", "memory_tools"]

TOOL_NAMES = ("remember", "recall", "forget")
RECALL_DEFAULT_TOP_K = 5


def _function(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
                "additionalProperties": False,
            },
        },
    }


def memory_tools() -> list[dict[str, Any]]:
    """The ``remember``, ``recall`` and ``forget`` tool definitions (a fresh list each call)."""
    session_id = {
        "type": ["string", "null"],
        "description": "The session to use; null for the current conversation's session.",
    }
    return [
        _function(
            "remember",
            "Store something worth remembering about the user or the conversation (a "
            "preference, a fact, a decision, a commitment) in long-term memory. Write it as "
            "a self-contained sentence.",
            {
                "content": {"type": "string", "description": "What to remember."},
                "session_id": session_id,
            },
        ),
        _function(
            "recall",
            "Search long-term memory (past conversations across sessions and the user's "
            "profile facts) for what is relevant to a query. Read-only.",
            {
                "query": {"type": "string", "description": "What to look for, in plain words."},
                "top_k": {
                    "type": ["integer", "null"],
                    "description": f"How many results at most; null for {RECALL_DEFAULT_TOP_K}.",
                },
            },
        ),
        _function(
            "forget",
            "Permanently delete memory. This is the only destructive memory tool and it "
            "cannot be undone. scope 'session' deletes one session (its messages, working "
            "memory and the facts learned from it). scope 'user' deletes EVERYTHING stored "
            "about the user in every session; use it only when the user has explicitly asked "
            "to be forgotten entirely.",
            {
                "scope": {
                    "type": "string",
                    "enum": ["session", "user"],
                    "description": "'session' or 'user'; there is no default.",
                },
                "session_id": session_id,
            },
        ),
    ]


async def execute_tool_call(
    manager: MemoryManager,
    scope: Scope,
    tool_call: Mapping[str, Any],
    *,
    field_prefix: str = "",
) -> dict[str, Any]:
    """Run an OpenAI tool call (``{"id", "type": "function", "function": {"name",
    "arguments": "<json>"}}``) against ``scope`` and return the tool message
    ``{"role": "tool", "tool_call_id", "content": "<json result>"}``.

    A missing or unknown tool name, arguments that are not a JSON object, unknown or
    ill-typed arguments raise :class:`InvalidInputError` whose ``field`` is the dotted path
    inside the tool call (``function.arguments.top_k``), after ``field_prefix``.
    """
    where = _Where(field_prefix)
    if not isinstance(tool_call, Mapping):
        raise InvalidInputError("a tool call must be an object", field=where.path(""))
    call_id = tool_call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidInputError("the tool call needs a string id", field=where.path("id"))
    if tool_call.get("type", "function") != "function":
        raise InvalidInputError("only function tool calls are supported", field=where.path("type"))
    function = tool_call.get("function")
    if not isinstance(function, Mapping):
        raise InvalidInputError("function must be an object", field=where.path("function"))
    name = function.get("name")
    if name not in TOOL_NAMES:
        raise InvalidInputError(
            f"unknown tool {name!r}; expected one of {', '.join(TOOL_NAMES)}",
            field=where.path("function.name"),
        )
    args = _Arguments(_parse_arguments(function.get("arguments"), where), where)
    if name == "remember":
        result = await _remember(manager, scope, args)
    elif name == "recall":
        result = await _recall(manager, scope, args)
    else:
        result = await _forget(manager, scope, args)
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)}


class _Where:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def path(self, inner: str) -> str:
        return ".".join(part for part in (self.prefix, inner) if part)


def _parse_arguments(raw: object, where: _Where) -> dict[str, Any]:
    field = where.path("function.arguments")
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise InvalidInputError("arguments are not valid JSON", field=field) from None
    if not isinstance(raw, dict):
        raise InvalidInputError("arguments must be a JSON object", field=field)
    return raw


class _Arguments:
    """Typed access to one call's arguments; every problem names its field."""

    def __init__(self, values: dict[str, Any], where: _Where) -> None:
        self.values = values
        self.where = where
        self.seen: set[str] = set()

    def field(self, name: str) -> str:
        return self.where.path(f"function.arguments.{name}")

    def text(self, name: str, *, nullable: bool = False) -> str | None:
        self.seen.add(name)
        value = self.values.get(name)
        if value is None and nullable:
            return None
        if not isinstance(value, str) or not value.strip():
            raise InvalidInputError(f"{name} must be a non-empty string", field=self.field(name))
        return value

    def integer(self, name: str) -> int | None:
        self.seen.add(name)
        value = self.values.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInputError(f"{name} must be an integer or null", field=self.field(name))
        return value

    def done(self) -> None:
        """Refuse arguments the tool does not declare."""
        for name in self.values:
            if name not in self.seen:
                raise InvalidInputError(f"unknown argument {name!r}", field=self.field(name))

    def session(self, scope: Scope) -> Scope:
        session_id = self.text("session_id", nullable=True) or scope.session_id
        if session_id is None:
            raise InvalidInputError(
                "no session: pass session_id or call with a session", field=self.field("session_id")
            )
        try:
            return scope.for_session(session_id)
        except ValueError:
            raise InvalidInputError("invalid session_id", field=self.field("session_id")) from None


async def _remember(manager: MemoryManager, scope: Scope, args: _Arguments) -> dict[str, Any]:
    content = args.text("content")
    session = args.session(scope)
    args.done()
    assert content is not None
    message = NewMessage(
        role="assistant",
        content=content,
        producer="memory-tool",
        metadata={"via": REMEMBER_TOOL_MARK},
    )
    stored = await manager.add_messages(session, [message], working=False)
    return {"stored": True, "episode_id": stored[0].id, "session_id": session.session_id}


async def _recall(manager: MemoryManager, scope: Scope, args: _Arguments) -> dict[str, Any]:
    query = args.text("query")
    given = args.integer("top_k")
    top_k = RECALL_DEFAULT_TOP_K if given is None else given
    args.done()
    assert query is not None
    if not 1 <= top_k <= manager.limits.max_top_k:
        raise InvalidInputError(
            f"top_k must be between 1 and {manager.limits.max_top_k}", field=args.field("top_k")
        )
    found = await manager.search(
        scope.model_copy(update={"session_id": None}),
        query,
        top_k=top_k,
        types=(MemoryType.EPISODIC, MemoryType.PROFILE),
    )
    return {
        "episodes": [
            {
                "id": hit.episode.id,
                "content": hit.episode.content,
                "speaker": hit.episode.producer or hit.episode.role,
                "timestamp": hit.episode.timestamp.isoformat(),
                "session_id": hit.episode.scope.session_id,
                "score": round(hit.score, 4),
            }
            for hit in found.episodic
        ],
        "facts": [
            {
                "id": hit.fact.id,
                "tag": hit.fact.tag,
                "feature": hit.fact.feature,
                "value": hit.fact.value,
                "confidence": hit.fact.confidence,
                "score": round(hit.score, 4),
            }
            for hit in found.profile
        ],
    }


async def _forget(manager: MemoryManager, scope: Scope, args: _Arguments) -> dict[str, Any]:
    args.seen.add("scope")
    which = args.values.get("scope")
    if which not in ("session", "user"):
        raise InvalidInputError("scope must be 'session' or 'user'", field=args.field("scope"))
    if which == "user":
        args.text("session_id", nullable=True)
        args.done()
        report = await manager.forget_user(scope)
        return {"forgotten": "user", "user_id": scope.user_id, **report.model_dump()}
    session = args.session(scope)
    args.done()
    report = await manager.forget_session(session)
    return {"forgotten": "session", "session_id": session.session_id, **report.model_dump()}
