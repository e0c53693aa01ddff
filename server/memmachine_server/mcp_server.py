"""memmachine's memory as MCP tools, over stdio (``memmachine mcp``) and streamable HTTP (``/mcp``).

The tools call the :class:`~memmachine.manager.MemoryManager` directly and answer with the same
wire models as the REST API (``memmachine_sdk.models``), as structured tool results.

Who a call is for:

- the tenant comes from the caller's credentials, never from tool arguments: over HTTP from the
  API key (:func:`memmachine_server.scope.authenticate`, checked before MCP runs, so a missing or
  unknown key is HTTP 401); over stdio the process owns its stores and the tenant is
  ``MEMMACHINE_TENANT`` (default ``default``);
- each id (``user_id``, ``session_id``, ``agent_id``, ``group_id``, ``org_id``, ``project_id``)
  comes from the tool's arguments first, then (HTTP) the ``X-User-ID`` / ``X-Session-ID`` / ...
  header, then the ``MEMMACHINE_USER_ID`` / ``MEMMACHINE_SESSION_ID`` / ... environment
  defaults read once when the server is built. A call without a user id fails naming
  ``user_id``.

Failures are tool errors (``isError`` results) whose text starts with the error code
(``invalid_input``, ``not_found``, ``conflict``, ``permission_denied``, ...); no traceback
reaches the client.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal, cast

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import Receive, Send
from starlette.types import Scope as AsgiScope

from memmachine.errors import (
    AuthenticationError,
    ConflictError,
    InvalidInputError,
    MemMachineError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    StoreError,
    StoreUnavailableError,
)
from memmachine.manager import MemoryManager
from memmachine.models import FactRecord, MemoryType, Scope
from memmachine.ports.procedures import AppScope, ProcedureRecord
from memmachine.prompting import build_memory_prompt
from memmachine_sdk import models as wire
from memmachine_server.convert import (
    added_out,
    episode_out,
    fact_out,
    new_messages,
    procedure_out,
    working_out,
)
from memmachine_server.hosts import mcp_transport_security
from memmachine_server.idempotency import idempotent_add
from memmachine_server.routes.custom import memory_types_out
from memmachine_server.scope import (
    Principal,
    keyring_of,
    principal_of,
    read_tenant,
    write_tenant,
)
from memmachine_server.state import AppState

__all__ = [
    "MCP_PATH",
    "SCOPE_ENV",
    "TOOL_NAMES",
    "CallerResolver",
    "McpCaller",
    "McpHttpEndpoint",
    "build_mcp_server",
    "scope_defaults",
    "serve_stdio",
    "stdio_tenant",
]

log = logging.getLogger("memmachine.mcp")

#: Where the streamable HTTP endpoint is served in the REST app.
MCP_PATH = "/mcp"

_ID_FIELDS = ("user_id", "session_id", "agent_id", "group_id", "org_id", "project_id")

#: The environment variable giving each id's default.
SCOPE_ENV: Mapping[str, str] = {name: f"MEMMACHINE_{name.upper()}" for name in _ID_FIELDS}
_HEADER_OF: Mapping[str, str] = {name: "x-" + name.replace("_", "-") for name in _ID_FIELDS}
#: The ASGI scope key the HTTP endpoint stores the authenticated caller under.
_CALLER_KEY = "memmachine.mcp.caller"

TOOL_NAMES = (
    "add_memory",
    "search_memory",
    "get_memory",
    "delete_memory",
    "get_profile",
    "set_profile",
    "get_state",
    "set_state",
    "memory_prompt",
    "forget",
    "list_memory_types",
    "store_custom_memory",
    "retrieve_custom_memory",
    "remember_procedure",
    "recall_procedures",
)


@dataclass(frozen=True)
class McpCaller:
    """Who a tool call is for: the manager to use, the principal (tenant and rights) and the
    ids the transport carried (HTTP ``X-*-ID`` headers; none over stdio)."""

    manager: MemoryManager
    principal: Principal
    ids: Mapping[str, str] = field(default_factory=dict)


#: Finds the caller of one tool call from its MCP request context.
CallerResolver = Callable[[Context], McpCaller]


def scope_defaults(environ: Mapping[str, str]) -> dict[str, str]:
    """The id defaults set in ``environ`` (``MEMMACHINE_USER_ID`` ...), empty values ignored."""
    return {name: environ[var] for name, var in SCOPE_ENV.items() if environ.get(var)}


def stdio_tenant(environ: Mapping[str, str]) -> str:
    """The tenant a stdio server acts for: ``MEMMACHINE_TENANT``, default ``default``.

    Raises InvalidInputError when it is not a valid id."""
    tenant = environ.get("MEMMACHINE_TENANT") or "default"
    try:
        Scope(tenant=tenant, user_id="probe")
    except ValidationError:
        raise InvalidInputError(
            "MEMMACHINE_TENANT must be 1-128 characters of letters, digits and . _ @ + - = # ~ |",
            field="MEMMACHINE_TENANT",
        ) from None
    return tenant


# ----------------------------------------------------------------- argument types

_ID_RULE = "1-128 letters, digits or . _ @ + - = # ~ |"
UserIdArg = Annotated[
    wire.Id | None,
    Field(
        description=(
            "The user whose memory this is (" + _ID_RULE + "). May be omitted when the "
            "connection supplies one (X-User-ID header over HTTP, MEMMACHINE_USER_ID)."
        )
    ),
]
SessionIdArg = Annotated[
    wire.Id | None,
    Field(
        description=(
            "The conversation/session id (" + _ID_RULE + "). Falls back to the "
            "X-Session-ID header (HTTP) or MEMMACHINE_SESSION_ID."
        )
    ),
]
AgentIdArg = Annotated[
    wire.Id | None,
    Field(
        description=(
            "Optional agent id: stored with new memories and narrowing reads to that agent. "
            "Falls back to X-Agent-ID (HTTP) or MEMMACHINE_AGENT_ID."
        )
    ),
]
GroupIdArg = Annotated[
    wire.Id | None,
    Field(
        description=(
            "Optional group id: stored with new memories and narrowing reads to that group. "
            "Falls back to X-Group-ID (HTTP) or MEMMACHINE_GROUP_ID."
        )
    ),
]
EpisodeIdArg = Annotated[
    str, Field(min_length=1, max_length=128, description="The episode id add_memory returned.")
]
TopKArg = Annotated[wire.TopK, Field(description="How many episodic and profile hits to return.")]
MemoryTypeArg = Annotated[
    str,
    Field(min_length=1, max_length=64, description="A custom memory type's name."),
]
CustomInputArg = Annotated[
    dict[str, Any],
    wire.Checked,
    Field(
        description=(
            "The type's input, an object matching its store_schema (for store) or "
            "retrieve_schema (for retrieve) as list_memory_types shows them."
        )
    ),
]


# ----------------------------------------------------------------- descriptions

_DESCRIPTIONS: Mapping[str, str] = {
    "add_memory": (
        "Store conversation messages in long-term (episodic) memory, in order, and by default "
        "also append them to the session's working memory. Give either `content` (one message, "
        "with `role`) or `messages` (a list), not both. Requires a user id and a session id. "
        "Returns the session id and the new episode ids (usable with get_memory and "
        "delete_memory)."
    ),
    "search_memory": (
        "Find what the user's memory holds about `query`: hybrid (semantic + keyword) search "
        "over episodes from all of the user's sessions (narrowed to one session, agent or group "
        "when given), the user's matching profile facts, and the session's newest "
        "working-memory messages. Read-only. Returns {episodic, profile, working}, hits ranked "
        "best first with a `score`."
    ),
    "get_memory": (
        "Read one stored episode (message) of the user by its id. Read-only. Fails with "
        "not_found when the user has no episode with that id."
    ),
    "delete_memory": (
        "Permanently delete one stored episode of the user by its id. Fails with not_found "
        "when the user has no episode with that id. Returns {deleted: 1}."
    ),
    "get_profile": (
        "List the user's profile facts (tag, feature, value, confidence, provenance), "
        "optionally only one `tag` and/or `feature`. Read-only."
    ),
    "set_profile": (
        "Create or replace profile facts of the user. A user holds one fact per "
        "(tag, feature): setting an existing pair replaces its value and keeps the old value "
        "in the fact's history. Returns the stored facts."
    ),
    "get_state": (
        "Read a session's working memory: its `state` object, `summary`, `version` and the "
        "newest `last_n` messages. A session never written reads as empty with version 0. "
        "Read-only."
    ),
    "set_state": (
        "Replace a session's working-memory `state` object and/or `summary` (at least one). "
        "With `expected_version` the write only happens if the session is still at that "
        "version; otherwise it fails with a conflict error giving the current version, so "
        "re-read with get_state and retry. Returns the working memory with its new version."
    ),
    "memory_prompt": (
        "Build the context for the next LLM call from the user's memory: relevant profile "
        "facts and episodes for `query` (the user's new message), plus the session's summary "
        "and recent messages when a session id is known, then the new message, within "
        "`max_tokens`. Read-only. Returns `messages` in OpenAI, Anthropic or Gemini shape, the "
        "`system` text on its own, and the ids of the facts and episodes used."
    ),
    "forget": (
        "Permanently erase memory. target='session' erases one session everywhere (its "
        "episodes, its working memory and the profile facts learned from it); target='user' "
        "erases everything stored for the user (all episodes, facts and sessions). Cannot be "
        "undone. Returns how many episodes, facts and sessions were deleted."
    ),
    "list_memory_types": (
        "List the custom memory types this server has (beyond episodic, profile and working "
        "memory): each one's name, description, the JSON schemas of its store and retrieve "
        "input, and which ids besides the user it needs (partition_by). Read-only."
    ),
    "store_custom_memory": (
        "Store into a custom memory type of the user: `memory_type` names it and `input` must "
        "match its store_schema (see list_memory_types). Fails with not_found for an unknown "
        "type and invalid_input naming input.<field> for input it refuses. Returns the "
        "type's result."
    ),
    "retrieve_custom_memory": (
        "Read from a custom memory type of the user: `memory_type` names it and `input` must "
        "match its retrieve_schema (see list_memory_types). Read-only. Returns the type's "
        "result."
    ),
    "remember_procedure": (
        "Remember how a task is done, for every user of this application (org, project and "
        "optionally agent): the goal, the steps that worked, preconditions and pitfalls. "
        "Write it for any user: personal details are redacted and instructions to the model "
        "are refused. A procedure of the same goal is superseded, its old version kept."
    ),
    "recall_procedures": (
        "Find this application's procedures for a task: `query` describes the task. "
        "Read-only. Returns the best matches with their steps, confidence and use counts."
    ),
}


def _annotations(
    title: str, *, read_only: bool, destructive: bool = False, idempotent: bool = False
) -> ToolAnnotations:
    return ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=None if read_only else destructive,
        idempotent_hint=None if read_only else idempotent,
        open_world_hint=False,
    )


_ANNOTATIONS: Mapping[str, ToolAnnotations] = {
    "add_memory": _annotations("Add memory", read_only=False),
    "search_memory": _annotations("Search memory", read_only=True),
    "get_memory": _annotations("Get a memory", read_only=True),
    "delete_memory": _annotations("Delete a memory", read_only=False, destructive=True),
    "get_profile": _annotations("Get profile facts", read_only=True),
    "set_profile": _annotations("Set profile facts", read_only=False, idempotent=True),
    "get_state": _annotations("Get working-memory state", read_only=True),
    "set_state": _annotations(
        "Set working-memory state", read_only=False, destructive=True, idempotent=True
    ),
    "memory_prompt": _annotations("Build a memory prompt", read_only=True),
    "forget": _annotations("Forget a session or user", read_only=False, destructive=True),
    "list_memory_types": _annotations("List custom memory types", read_only=True),
    "store_custom_memory": _annotations("Store custom memory", read_only=False),
    "retrieve_custom_memory": _annotations("Retrieve custom memory", read_only=True),
    "remember_procedure": _annotations("Remember a procedure", read_only=False),
    "recall_procedures": _annotations("Recall procedures", read_only=True),
}


# ----------------------------------------------------------------- errors


#: Errors about the call itself, whose message is for the caller (the REST 4xx family).
_CALLER_ERRORS = (
    InvalidInputError,
    AuthenticationError,
    PermissionDeniedError,
    RateLimitedError,
    NotFoundError,
    ConflictError,
)


def _tool_error(exc: MemMachineError) -> ToolError:
    """The client-facing text of a core error: ``code: message`` plus the field, the current
    version or the retry delay when there is one. Store and internal details stay in the log."""
    message = exc.message
    if isinstance(exc, StoreError):
        log.warning("store %s failed during an MCP tool call: %s", exc.store, exc.message)
        message = f"the {exc.store} store is unavailable"
    elif not isinstance(exc, _CALLER_ERRORS):
        log.error("%s during an MCP tool call: %s", exc.code, exc.message)
        message = "internal error"
    text = f"{exc.code}: {message}"
    if isinstance(exc, InvalidInputError) and exc.field:
        text += f" (field: {exc.field})"
    if isinstance(exc, ConflictError) and exc.current_version is not None:
        text += f" (current_version: {exc.current_version})"
    if isinstance(exc, RateLimitedError):
        text += f" (retry after {max(1.0, exc.retry_after):.0f}s)"
    return ToolError(text)


@contextmanager
def _tool_errors() -> Iterator[None]:
    try:
        yield
    except MemMachineError as exc:
        raise _tool_error(exc) from None


# ----------------------------------------------------------------- the tools


class _MemoryTools:
    """The tool functions. Each resolves its caller, checks the caller's right to read or
    write, builds the scope and calls the manager."""

    def __init__(self, resolve_caller: CallerResolver, defaults: Mapping[str, str]) -> None:
        self._resolve_caller = resolve_caller
        self._defaults = dict(defaults)

    def _begin(
        self,
        ctx: Context,
        ids: Mapping[str, str | None],
        *,
        write: bool,
        require_session: bool = False,
        stores: bool | None = None,
    ) -> tuple[MemoryManager, Scope]:
        """The manager and scope of a tool call; a call that ``stores`` (by default every
        write) refuses ids holding personal data, as REST does."""
        caller = self._resolve_caller(ctx)
        # The same checks (and messages) as the REST routes' ReadTenant / WriteTenant.
        tenant = write_tenant(caller.principal) if write else read_tenant(caller.principal)
        values: dict[str, str] = {}
        for name in _ID_FIELDS:
            value = ids.get(name) or caller.ids.get(name) or self._defaults.get(name)
            if value:
                values[name] = value
        if "user_id" not in values:
            raise InvalidInputError(
                "user_id is required (as an argument, the X-User-ID header or MEMMACHINE_USER_ID)",
                field="user_id",
            )
        if require_session and "session_id" not in values:
            raise InvalidInputError(
                "session_id is required (as an argument, the X-Session-ID header or "
                "MEMMACHINE_SESSION_ID)",
                field="session_id",
            )
        if write if stores is None else stores:
            caller.manager.gate.check_ids(values)
        try:
            scope = Scope(tenant=tenant, **values)
        except ValidationError as exc:
            name = ".".join(str(part) for part in exc.errors()[0]["loc"])
            raise InvalidInputError(f"{name} must be {_ID_RULE}", field=name) from None
        return caller.manager, scope

    async def add_memory(
        self,
        ctx: Context,
        content: Annotated[
            str | None,
            wire.Checked,
            Field(min_length=1, description="The text of one message to store."),
        ] = None,
        role: Annotated[
            wire.Role, Field(description="Who said `content`: user, assistant, system or tool.")
        ] = "user",
        messages: Annotated[
            list[wire.MessageIn] | None,
            Field(min_length=1, description="Several messages to store, oldest first."),
        ] = None,
        user_id: UserIdArg = None,
        session_id: SessionIdArg = None,
        agent_id: AgentIdArg = None,
        group_id: GroupIdArg = None,
        working: Annotated[
            bool, Field(description="Also append the messages to the session's working memory.")
        ] = True,
        idempotency_key: Annotated[
            str | None,
            Field(
                description="A key of your own for this add (1-255 printable ASCII "
                "characters): calling again with the same key and arguments stores nothing "
                "more and returns the first result."
            ),
        ] = None,
    ) -> wire.AddMemoriesResponse:
        with _tool_errors():
            if (content is None) == (messages is None):
                raise InvalidInputError("give exactly one of content or messages", "content")
            for index, message in enumerate(messages or []):
                if message.attachments:  # never dropped unseen: REST takes them
                    raise InvalidInputError(
                        "attachments are taken by the REST API (POST /v1/memories), not MCP",
                        f"messages.{index}.attachments",
                    )
            batch = (
                messages
                if messages is not None
                else [wire.MessageIn(role=role, content=content or "")]
            )
            manager, scope = self._begin(
                ctx,
                {
                    "user_id": user_id,
                    "session_id": session_id,
                    "agent_id": agent_id,
                    "group_id": group_id,
                },
                write=True,
                require_session=True,
            )
            if idempotency_key is None:
                added = await manager.add_messages(scope, new_messages(batch), working=working)
                return added_out(scope, added)
            return await idempotent_add(manager, scope, batch, working, idempotency_key)

    async def search_memory(
        self,
        ctx: Context,
        query: Annotated[str, wire.Checked, Field(min_length=1, description="What to look for.")],
        top_k: TopKArg = 10,
        types: Annotated[
            list[wire.MemoryTypeName],
            Field(min_length=1, description="Which memories to search."),
        ] = ["episodic", "profile", "working"],  # noqa: B006
        expand_context: Annotated[
            int,
            Field(ge=0, le=10, description="Neighbouring turns to add around each episode hit."),
        ] = 0,
        working_last_n: Annotated[
            int,
            Field(ge=0, le=1000, description="How many newest working-memory messages to add."),
        ] = 20,
        user_id: UserIdArg = None,
        session_id: SessionIdArg = None,
        agent_id: AgentIdArg = None,
        group_id: GroupIdArg = None,
    ) -> wire.SearchResponse:
        with _tool_errors():
            manager, scope = self._begin(
                ctx,
                {
                    "user_id": user_id,
                    "session_id": session_id,
                    "agent_id": agent_id,
                    "group_id": group_id,
                },
                write=False,
            )
            result = await manager.search(
                scope,
                query,
                top_k=top_k,
                types=[MemoryType(kind) for kind in types],
                expand_context=expand_context,
                working_last_n=working_last_n,
            )
            return wire.SearchResponse(
                episodic=[episode_out(hit.episode, hit) for hit in result.episodic],
                profile=[fact_out(hit.fact, hit) for hit in result.profile],
                working=None if result.working is None else working_out(result.working),
            )

    async def get_memory(
        self, ctx: Context, episode_id: EpisodeIdArg, user_id: UserIdArg = None
    ) -> wire.EpisodeOut:
        with _tool_errors():
            manager, scope = self._begin(ctx, {"user_id": user_id}, write=False)
            return episode_out(await manager.get_episode(scope, episode_id))

    async def delete_memory(
        self, ctx: Context, episode_id: EpisodeIdArg, user_id: UserIdArg = None
    ) -> wire.DeletedResponse:
        with _tool_errors():
            manager, scope = self._begin(ctx, {"user_id": user_id}, write=True, stores=False)
            await manager.delete_episode(scope, episode_id)
            return wire.DeletedResponse(deleted=1)

    async def get_profile(
        self,
        ctx: Context,
        tag: Annotated[
            str | None, wire.Checked, Field(min_length=1, description="Only facts with this tag.")
        ] = None,
        feature: Annotated[
            str | None,
            wire.Checked,
            Field(min_length=1, description="Only facts with this feature."),
        ] = None,
        limit: Annotated[
            int, Field(ge=1, le=10_000, description="At most this many facts.")
        ] = 1000,
        offset: Annotated[wire.Offset, Field(description="Skip this many facts (paging).")] = 0,
        user_id: UserIdArg = None,
    ) -> wire.ProfileResponse:
        with _tool_errors():
            manager, scope = self._begin(ctx, {"user_id": user_id}, write=False)
            facts = await manager.list_facts(
                scope, tag=tag, feature=feature, limit=limit, offset=offset
            )
            return wire.ProfileResponse(facts=[fact_out(fact) for fact in facts])

    async def set_profile(
        self,
        ctx: Context,
        facts: Annotated[
            list[wire.FactIn],
            Field(
                min_length=1,
                description=(
                    "Facts to store, each {tag, feature, value} (e.g. tag 'preferences', "
                    "feature 'favourite_color', value 'green') with an optional confidence "
                    "in [0, 1]."
                ),
            ),
        ],
        user_id: UserIdArg = None,
        session_id: Annotated[
            wire.Id | None,
            Field(description="The session the facts were learned in (kept as provenance)."),
        ] = None,
    ) -> wire.ProfileResponse:
        with _tool_errors():
            manager, scope = self._begin(
                ctx, {"user_id": user_id, "session_id": session_id}, write=True
            )
            records = [FactRecord.model_validate(fact.model_dump()) for fact in facts]
            stored = await manager.set_facts(scope, records)
            return wire.ProfileResponse(facts=[fact_out(fact) for fact in stored])

    async def get_state(
        self,
        ctx: Context,
        session_id: SessionIdArg = None,
        last_n: Annotated[
            int,
            Field(ge=0, le=1000, description="Include this many newest messages (0 = none)."),
        ] = 20,
        user_id: UserIdArg = None,
    ) -> wire.WorkingMemoryOut:
        with _tool_errors():
            manager, scope = self._begin(
                ctx,
                {"user_id": user_id, "session_id": session_id},
                write=False,
                require_session=True,
            )
            return working_out(await manager.get_working(scope, last_n=last_n))

    async def set_state(
        self,
        ctx: Context,
        state: Annotated[
            dict[str, Any] | None,
            wire.Checked,
            Field(description="The new state object; replaces the previous one entirely."),
        ] = None,
        summary: Annotated[
            str | None, wire.Checked, Field(description="The new running summary of the session.")
        ] = None,
        expected_version: Annotated[
            int | None,
            Field(
                ge=0,
                le=2**63 - 1,
                description=(
                    "Only write if the session is at this version (from get_state); "
                    "0 = only if never written."
                ),
            ),
        ] = None,
        session_id: SessionIdArg = None,
        user_id: UserIdArg = None,
    ) -> wire.WorkingMemoryOut:
        with _tool_errors():
            if state is None and summary is None:
                raise InvalidInputError("give state and/or summary", field="state")
            manager, scope = self._begin(
                ctx,
                {"user_id": user_id, "session_id": session_id},
                write=True,
                require_session=True,
            )
            memory = await manager.put_working(
                scope, state=state, summary=summary, expected_version=expected_version
            )
            return working_out(memory)

    async def memory_prompt(
        self,
        ctx: Context,
        query: Annotated[
            str, wire.Checked, Field(min_length=1, description="The user's new message.")
        ],
        max_tokens: Annotated[
            int,
            Field(
                ge=1,
                le=1_000_000,
                description=(
                    "Token budget: the prompt's tokens by the server's tokenizer, plus 4 per "
                    "message."
                ),
            ),
        ] = 2000,
        format: Annotated[
            wire.PromptFormatName, Field(description="Provider shape of `messages`.")
        ] = "openai",
        top_k: Annotated[wire.TopK, Field(description="Relevant episodes to consider.")] = 10,
        recent_messages: Annotated[
            int,
            Field(ge=0, le=1000, description="Newest session messages to consider."),
        ] = 20,
        user_id: UserIdArg = None,
        session_id: SessionIdArg = None,
        agent_id: AgentIdArg = None,
        group_id: GroupIdArg = None,
    ) -> wire.MemoryPromptResponse:
        with _tool_errors():
            manager, scope = self._begin(
                ctx,
                {
                    "user_id": user_id,
                    "session_id": session_id,
                    "agent_id": agent_id,
                    "group_id": group_id,
                },
                write=False,
            )
            vector = await manager.embed_query(query)
            prompt = await build_memory_prompt(
                manager,
                scope,
                query,
                max_tokens=max_tokens,
                format=format,
                top_k=top_k,
                recent_messages=recent_messages,
                procedures=await manager.procedural_service.for_prompt(
                    scope, query, query_vector=vector
                ),
                query_vector=vector,
            )
            return wire.MemoryPromptResponse.model_validate(prompt.model_dump())

    async def forget(
        self,
        ctx: Context,
        target: Annotated[
            Literal["session", "user"],
            Field(description="'session' erases one session; 'user' erases the whole user."),
        ],
        user_id: UserIdArg = None,
        session_id: Annotated[
            wire.Id | None,
            Field(
                description=(
                    "The session to erase (target='session'); falls back to X-Session-ID "
                    "(HTTP) or MEMMACHINE_SESSION_ID. Ignored for target='user'."
                )
            ),
        ] = None,
    ) -> wire.ForgetResponse:
        with _tool_errors():
            if target == "session":
                manager, scope = self._begin(
                    ctx,
                    {"user_id": user_id, "session_id": session_id},
                    write=True,
                    require_session=True,
                    stores=False,
                )
                report = await manager.forget_session(scope)
            else:
                manager, scope = self._begin(ctx, {"user_id": user_id}, write=True, stores=False)
                report = await manager.forget_user(scope)
            return wire.ForgetResponse.model_validate(report.model_dump())

    async def list_memory_types(
        self,
        ctx: Context,
        memory_type: Annotated[
            str | None,
            Field(description="Only this type (not_found when unknown); all when omitted."),
        ] = None,
    ) -> wire.MemoryTypesResponse:
        with _tool_errors():
            caller = self._resolve_caller(ctx)
            read_tenant(caller.principal)
            registry = caller.manager.memory_types
            listing = memory_types_out(registry)
            if memory_type is not None:
                registry.get(memory_type)  # not_found naming it
                listing.types = [item for item in listing.types if item.name == memory_type]
            return listing

    async def store_custom_memory(
        self,
        ctx: Context,
        memory_type: MemoryTypeArg,
        input: CustomInputArg,
        user_id: UserIdArg = None,
        session_id: SessionIdArg = None,
        agent_id: AgentIdArg = None,
        group_id: GroupIdArg = None,
        expires_at: Annotated[
            datetime | None,
            Field(description="When the records it writes expire (ISO 8601); or ttl_seconds."),
        ] = None,
        ttl_seconds: Annotated[
            int | None, Field(gt=0, description="Seconds until the records it writes expire.")
        ] = None,
    ) -> wire.CustomMemoryResponse:
        expiry = {"expires_at": expires_at, "ttl_seconds": ttl_seconds}
        return await self._custom(
            ctx, "store", memory_type, input, user_id, session_id, agent_id, group_id, expiry
        )

    async def retrieve_custom_memory(
        self,
        ctx: Context,
        memory_type: MemoryTypeArg,
        input: CustomInputArg | None = None,
        user_id: UserIdArg = None,
        session_id: SessionIdArg = None,
        agent_id: AgentIdArg = None,
        group_id: GroupIdArg = None,
    ) -> wire.CustomMemoryResponse:
        return await self._custom(
            ctx, "retrieve", memory_type, input or {}, user_id, session_id, agent_id, group_id
        )

    async def _custom(
        self,
        ctx: Context,
        action: Literal["store", "retrieve"],
        memory_type: str,
        payload: dict[str, Any],
        user_id: str | None,
        session_id: str | None,
        agent_id: str | None,
        group_id: str | None,
        expiry: dict[str, Any] | None = None,
    ) -> wire.CustomMemoryResponse:
        """Run a custom type's ``store`` / ``retrieve`` (see :mod:`memmachine.memory_types`);
        ``expiry`` (``expires_at`` / ``ttl_seconds``) is the store's."""
        with _tool_errors():
            ids = {
                "user_id": user_id,
                "session_id": session_id,
                "agent_id": agent_id,
                "group_id": group_id,
            }
            manager, scope = self._begin(ctx, ids, write=action == "store")
            registry = manager.memory_types
            if action == "store":
                result = await registry.store(
                    memory_type, scope, payload, field_prefix="input", **(expiry or {})
                )
            else:
                result = await registry.retrieve(memory_type, scope, payload, field_prefix="input")
            return wire.CustomMemoryResponse(type=memory_type, result=result)

    def _begin_app(
        self, ctx: Context, agent_id: str | None, *, write: bool
    ) -> tuple[MemoryManager, AppScope]:
        """The caller's manager and application (tenant, org, project, agent): procedures
        belong to no user."""
        caller = self._resolve_caller(ctx)
        tenant = write_tenant(caller.principal) if write else read_tenant(caller.principal)
        values: dict[str, str] = {}
        for name in ("org_id", "project_id", "agent_id"):
            value = (agent_id if name == "agent_id" else None) or caller.ids.get(name)
            value = value or self._defaults.get(name)
            if value:
                values[name] = value
        try:
            return caller.manager, AppScope(tenant=tenant, **values)
        except ValidationError as exc:
            name = ".".join(str(part) for part in exc.errors()[0]["loc"])
            raise InvalidInputError(f"{name} must be {_ID_RULE}", field=name) from None

    async def remember_procedure(
        self,
        ctx: Context,
        goal: Annotated[
            str, wire.Checked, Field(min_length=1, description="The kind of task, for any user.")
        ],
        steps: Annotated[list[str], Field(min_length=1, description="What to do, in order.")],
        preconditions: Annotated[
            list[str], Field(description="What must hold before the first step.")
        ] = [],  # noqa: B006
        pitfalls: Annotated[list[str], Field(description="What went wrong before.")] = [],  # noqa: B006
        agent_id: AgentIdArg = None,
    ) -> wire.ProcedureOut:
        with _tool_errors():
            manager, app = self._begin_app(ctx, agent_id, write=True)
            record = ProcedureRecord(
                goal=goal, steps=steps, preconditions=preconditions, pitfalls=pitfalls
            )
            return procedure_out(await manager.procedural_service.remember(app, record))

    async def recall_procedures(
        self,
        ctx: Context,
        query: Annotated[
            str, wire.Checked, Field(min_length=1, description="The task at hand, in words.")
        ],
        top_k: Annotated[wire.TopK, Field(description="How many procedures to return.")] = 3,
        agent_id: AgentIdArg = None,
    ) -> wire.ProcedureSearchResponse:
        with _tool_errors():
            manager, app = self._begin_app(ctx, agent_id, write=False)
            hits = await manager.procedural_service.search(app, query, top_k=top_k)
            return wire.ProcedureSearchResponse(
                hits=[wire.ProcedureHitOut(procedure=procedure_out(p), score=s) for p, s in hits]
            )


def build_mcp_server(
    resolve_caller: CallerResolver,
    *,
    defaults: Mapping[str, str] | None = None,
    version: str = "",
) -> MCPServer:
    """An MCP server with the memory tools (:data:`TOOL_NAMES`).

    ``resolve_caller`` finds the manager, principal and transport ids of each call;
    ``defaults`` are the ids used when neither the arguments nor the transport give one
    (see :func:`scope_defaults`)."""
    tools = _MemoryTools(resolve_caller, defaults or {})
    with _root_logging_untouched():
        server = _new_server(version)
    for name in TOOL_NAMES:
        server.add_tool(
            getattr(tools, name),
            name=name,
            description=_DESCRIPTIONS[name],
            annotations=_ANNOTATIONS[name],
            structured_output=True,
        )
    return server


@contextmanager
def _root_logging_untouched() -> Iterator[None]:
    """Undo what the block does to the root logger: MCPServer() configures root logging when
    nothing has yet, and logging belongs to the process that hosts memmachine."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)


def _new_server(version: str) -> MCPServer:
    return MCPServer(
        "memmachine",
        title="memmachine",
        version=version,
        instructions=(
            "Long-term memory for this conversation's user: store messages with add_memory, "
            "recall with search_memory or memory_prompt, keep profile facts with set_profile "
            "and per-session state with set_state."
        ),
    )


# ----------------------------------------------------------------- stdio


class _PipeLines:
    """The lines of a pipe, read on the event loop (no worker thread), so cancelling the
    server (SIGTERM) stops it at once instead of waiting for the next line of input.

    A line longer than the reader's limit is dropped with a warning."""

    def __init__(self, reader: asyncio.StreamReader, limit: int) -> None:
        self._reader = reader
        self._limit = limit

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        skipping = False
        while True:
            try:
                line = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:  # end of input
                if skipping or not exc.partial:
                    raise StopAsyncIteration from None
                line = exc.partial
            except asyncio.LimitOverrunError as exc:  # over the limit: drop the whole line
                if not skipping:
                    log.warning("dropped an MCP message longer than %d bytes", self._limit)
                skipping = True
                await self._reader.readexactly(max(1, exc.consumed))
                continue
            if skipping:
                skipping = False
                continue
            return line.decode("utf-8", errors="replace")


async def serve_stdio(server: MCPServer, *, max_message_bytes: int = 64 * 1024 * 1024) -> None:
    """Serve ``server`` on this process's stdin/stdout until stdin closes (or the calling task
    is cancelled). While serving, stray writes to stdout go to stderr (the SDK's guard)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=max_message_bytes, loop=loop)
    pipe = os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe
        )
    except ValueError:  # stdin is a regular file: the SDK's thread-based reader handles it
        pipe.close()
        await server.run_stdio_async()
        return
    # The SDK has no public way to run an MCPServer on given streams; its own in-memory
    # client reaches the low-level server the same way.
    lowlevel = server._lowlevel_server
    lines = cast("anyio.AsyncFile[str]", _PipeLines(reader, max_message_bytes))
    try:
        async with stdio_server(stdin=lines) as (read_stream, write_stream):
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
    finally:
        transport.close()


# ----------------------------------------------------------------- streamable HTTP


def _http_caller(ctx: Context) -> McpCaller:
    """The caller the HTTP endpoint authenticated for this request."""
    try:
        request = ctx.request_context.request
    except ValueError:  # no request context at all
        request = None
    asgi_scope = getattr(request, "scope", None)
    caller = asgi_scope.get(_CALLER_KEY) if isinstance(asgi_scope, dict) else None
    if not isinstance(caller, McpCaller):
        raise AuthenticationError("this request was not authenticated")
    return caller


class McpHttpEndpoint:
    """The ASGI app serving MCP over streamable HTTP at :data:`MCP_PATH` of the REST app.

    Stateless, with JSON responses: every POST carries its credentials and is authenticated
    like a REST request (:func:`~memmachine_server.scope.principal_of`) before MCP sees it;
    a missing or unknown key raises AuthenticationError (a key over its rate limit,
    RateLimitedError), which the app's error table turns into HTTP 401 (429). Each request is
    served on its own. Requests are served only while :meth:`running` is entered (the app's
    lifespan), with the app's manager."""

    def __init__(self, defaults: Mapping[str, str] | None = None, *, version: str = "") -> None:
        self._server = build_mcp_server(_http_caller, defaults=defaults, version=version)
        self._state: AppState | None = None
        self._sessions: StreamableHTTPSessionManager | None = None

    @property
    def server(self) -> MCPServer:
        return self._server

    @asynccontextmanager
    async def running(self, state: AppState) -> AsyncIterator[None]:
        """Serve requests with ``state``'s manager and keys until the block exits."""
        # A session manager runs once; each app start gets a fresh one.
        self._server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            # The app's HostAllowList answers first; the SDK checks the same hosts again.
            transport_security=mcp_transport_security(state.settings, keyring_of(state)),
        )
        sessions = self._server.session_manager
        async with sessions.run():
            self._state, self._sessions = state, sessions
            try:
                yield
            finally:
                self._state = self._sessions = None

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        state, sessions = self._state, self._sessions
        if state is None or sessions is None:
            raise StoreUnavailableError("the MCP endpoint is not running", store="mcp")
        headers = Headers(scope=scope)
        principal = await principal_of(Request(scope), state)
        ids = {name: headers[header] for name, header in _HEADER_OF.items() if headers.get(header)}
        scope[_CALLER_KEY] = McpCaller(manager=state.manager, principal=principal, ids=ids)
        await sessions.handle_request(scope, receive, send)
