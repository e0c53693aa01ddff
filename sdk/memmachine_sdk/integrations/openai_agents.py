"""The OpenAI Agents SDK on memmachine: :class:`MemMachineSession`, a session (the SDK's
``Session`` protocol) on a session's working memory, and :func:`memory_tools` /
:func:`amemory_tools`, memmachine's ``remember``, ``recall`` and ``forget`` tools as the
SDK's function tools.

Install with ``pip install 'memmachine-sdk[openai-agents]'``.

Session: ``Runner.run(agent, text, session=MemMachineSession("s1", user_id="ana",
async_client=mm))`` keeps the conversation's items in working memory of user ``ana``'s
session ``s1``, so another process (or a later run) continues it. Each item is stored whole
in its message's metadata and read back as it was added, in order; the message's role and
content are the item's (its text, the call for a function call, the output for a function
call's output), so working memory, memory prompts and compaction see the conversation.
``pop_item`` removes the newest item (a conditional write: a concurrent change makes it
read again and retry); ``clear_session`` empties the session's working memory, while
episodes, if any were stored for the session, stay.

Tools: ``memory_tools(client=mm, user_id="ana", session_id="s1")`` fetches the tool
definitions from the server (``GET /v1/tools``: strict JSON schemas) and returns one
``FunctionTool`` per tool, which runs the model's call on the server (``POST
/v1/tools/execute``) for that user (and session, for ``remember`` without one). The model
gets the tool's JSON result; bad arguments come back to it as ``{"error", "field"}`` (the
argument's name) so it can correct itself, while authentication and server errors fail the
run. ``forget`` deletes memory for good: set ``needs_approval = True`` on that tool to have
a person confirm it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, cast

from agents import FunctionTool
from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.memory.session_settings import resolve_session_limit
from agents.tool_context import ToolContext

from memmachine_sdk import models as m
from memmachine_sdk._client import AsyncClient, Client
from memmachine_sdk.errors import ConflictError, MemMachineAPIError
from memmachine_sdk.integrations._bridge import Clients, Plan, SessionAdapter, Step

__all__ = ["MemMachineSession", "amemory_tools", "memory_tools"]

#: The metadata key holding a stored item.
ITEM_KEY = "openai_agents"
#: Longest text kept as a message's content (the whole item is in its metadata).
CONTENT_CHARS = 16_000
#: Tool errors the model is told about (bad input it can correct), not raised.
MODEL_ERRORS = frozenset({400, 404, 409, 413, 422})
_POP_ATTEMPTS = 5
#: Where the server's errors put a tool argument: the model is told the argument's name.
_ARGUMENTS = "tool_call.function.arguments."


class MemMachineSession(SessionAdapter):
    """The Agents SDK ``Session`` of one memmachine session for one user.

    * ``session_id`` / ``user_id``: whose session (ids as the memmachine API accepts them).
    * ``client`` / ``async_client``: the SDK client(s) to talk through; the session's
      methods are async, so give ``async_client`` (a blocking ``client`` alone is run in a
      worker thread).
    * ``session_settings``: the Agents SDK's settings (``limit``: how many of the newest
      items ``get_items`` returns by default).
    """

    def __init__(
        self,
        session_id: str,
        *,
        user_id: str,
        client: Client | None = None,
        async_client: AsyncClient | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        super().__init__(session_id, user_id=user_id, client=client, async_client=async_client)
        self.session_settings = session_settings

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit``, only the newest ``limit``."""
        return await self._clients.arun(
            self._get(resolve_session_limit(limit, self.session_settings))
        )

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order, in one request."""
        await self._clients.arun(self._add(items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it; ``None`` when the session is empty."""
        return await self._clients.arun(self._pop())

    async def clear_session(self) -> None:
        """Empty the session's working memory."""
        await self._clients.arun(self._clear_working())

    # ------------------------------------------------------------------ plans

    def _get(self, limit: int | None) -> Plan[list[TResponseInputItem]]:
        if limit is not None and limit <= 0:
            return []
        working = yield from self._read_working(limit)
        return [_item(message) for message in working.messages]

    def _add(self, items: list[TResponseInputItem]) -> Plan[None]:
        yield from self._append_working([_message(item) for item in items])

    def _pop(self) -> Plan[TResponseInputItem | None]:
        for attempt in range(_POP_ATTEMPTS):
            working = yield from self._read_working()
            if not working.messages:
                return None
            keep = [_resent(message) for message in working.messages[:-1]]
            try:
                yield _rewrite_step(self.session_id, self.user_id, keep, working.version)
            except ConflictError:
                if attempt + 1 == _POP_ATTEMPTS:
                    raise
                continue  # written meanwhile: read the newest item again
            return _item(working.messages[-1])
        return None  # not reached: the last attempt returns or raises


def _rewrite_step(session: str, user: str, messages: list[dict[str, Any]], version: int) -> Step:
    return lambda c: c.put_working(
        session, user_id=user, messages=messages, expected_version=version
    )


def _resent(message: m.WorkingMessageOut) -> dict[str, Any]:
    return message.model_dump(mode="json")


# ---------------------------------------------------------------------- items


def _message(item: TResponseInputItem) -> dict[str, Any]:
    """``item`` as a working-memory message: its role and text, the item in metadata."""
    raw = cast(dict[str, Any], item)
    text = _text(raw)
    if len(text) > CONTENT_CHARS:
        text = text[: CONTENT_CHARS - 1] + "…"
    return {"role": _role(raw), "content": text, "metadata": {ITEM_KEY: dict(raw)}}


def _role(item: dict[str, Any]) -> str:
    role = item.get("role")
    if role in ("user", "assistant", "system"):
        return str(role)
    if role == "developer":
        return "system"
    return "tool" if item.get("type") == "function_call_output" else "assistant"


def _text(item: dict[str, Any]) -> str:
    kind = item.get("type") or "message"
    content = item.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "\n".join(_part_text(part) for part in content if _part_text(part))
    elif kind == "function_call":
        text = f"{item.get('name')}({item.get('arguments') or ''})"
    elif kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else json.dumps(output)
    elif kind == "reasoning":
        text = "\n".join(_part_text(part) for part in item.get("summary") or [])
    else:
        text = ""
    return text if text.strip() else f"({kind} item)"


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return ""
    text = part.get("text") or part.get("refusal") or ""
    return text if isinstance(text, str) else ""


def _item(message: m.WorkingMessageOut) -> TResponseInputItem:
    stored = message.metadata.get(ITEM_KEY)
    if isinstance(stored, dict):
        return cast(TResponseInputItem, stored)
    # A message written another way (REST, another SDK): a plain message item.
    role = message.role if message.role in ("user", "system") else "assistant"
    return cast(TResponseInputItem, {"role": role, "content": message.content})


# ---------------------------------------------------------------------- tools


def memory_tools(
    *,
    user_id: str,
    session_id: str | None = None,
    client: Client | None = None,
    async_client: AsyncClient | None = None,
) -> list[FunctionTool]:
    """``remember``, ``recall`` and ``forget`` as function tools acting for ``user_id``
    (``session_id``: the session ``remember`` and ``forget`` use when the model names
    none). Fetches their definitions with the blocking ``client``; the tools run their
    calls with ``async_client`` when given."""
    clients = Clients(client, async_client, owner="memory_tools")
    definitions = clients.run(_definitions())
    return _function_tools(definitions, clients, user_id, session_id)


async def amemory_tools(
    *,
    user_id: str,
    session_id: str | None = None,
    client: Client | None = None,
    async_client: AsyncClient | None = None,
) -> list[FunctionTool]:
    """:func:`memory_tools`, fetching the definitions without blocking."""
    clients = Clients(client, async_client, owner="amemory_tools")
    definitions = await clients.arun(_definitions())
    return _function_tools(definitions, clients, user_id, session_id)


def _definitions() -> Plan[list[dict[str, Any]]]:
    definitions: list[dict[str, Any]] = yield lambda c: c.tools()
    return definitions


def _function_tools(
    definitions: list[dict[str, Any]], clients: Clients, user: str, session: str | None
) -> list[FunctionTool]:
    tools = []
    for definition in definitions:
        function = definition["function"]
        tools.append(
            FunctionTool(
                name=function["name"],
                description=function["description"],
                params_json_schema=function["parameters"],
                on_invoke_tool=_invoker(function["name"], clients, user, session),
                strict_json_schema=bool(function.get("strict", True)),
            )
        )
    return tools


def _invoker(
    name: str, clients: Clients, user: str, session: str | None
) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        call = {
            "id": context.tool_call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        try:
            message = await clients.arun(_execute(call, user, session))
        except MemMachineAPIError as exc:
            if exc.status not in MODEL_ERRORS:
                raise
            field = (exc.field or "").removeprefix(_ARGUMENTS) or None
            return json.dumps({"error": exc.message, "field": field})
        return str(message["content"])

    return invoke


def _execute(call: dict[str, Any], user: str, session: str | None) -> Plan[dict[str, Any]]:
    message: dict[str, Any] = yield lambda c: c.execute_tool(call, user_id=user, session_id=session)
    return message
