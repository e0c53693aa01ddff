"""The ``Idempotency-Key`` header on every write route (POST, PUT, PATCH, DELETE under
``/v1``, searches aside): a write sent again with the same key gets the first answer
again, applied once (:class:`memmachine.memory.idempotency.IdempotentWrites` says which
answers are kept, for how long, and what a key in use or reused for another body gets).

The key is scoped by the caller's tenant, found from its API key without spending a
request of its rate limit (the route itself spends it). A request whose credentials do not
resolve to a tenant runs as if it carried no key: the route refuses it anyway.
A replayed answer carries ``Idempotent-Replayed: true``.
"""

from __future__ import annotations

import hashlib
import json

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from memmachine.errors import MemMachineError
from memmachine.manager import MemoryManager
from memmachine.memory.idempotency import IDEMPOTENCY_HEADER, check_key, episode_ids_for
from memmachine.models import Scope
from memmachine_sdk import models as wire
from memmachine_server.convert import added_out, new_messages
from memmachine_server.errors import http_error_response, memmachine_error_response
from memmachine_server.scope import keyring_of, presented_key
from memmachine_server.state import AppState

__all__ = ["IdempotencyKeys", "idempotent_add"]

_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_HEADER = IDEMPOTENCY_HEADER.lower().encode()


class IdempotencyKeys:
    """ASGI middleware: writes with an ``Idempotency-Key`` header run once per tenant and
    key (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        key = _key_of(scope)
        state: AppState | None = getattr(scope["app"].state, "memmachine", None)
        if key is None or state is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        tenant = await _tenant(state, request)
        if tenant is None:
            await self.app(scope, receive, send)
            return
        try:
            body = await _read_body(receive)
        except HTTPException as exc:  # refused while streamed in (over the size limit)
            refused = await http_error_response(request, exc)
            await refused(scope, receive, send)
            return
        fingerprint = hashlib.sha256(
            b"\0".join(
                [scope["method"].encode(), scope["path"].encode(), scope["query_string"], body]
            )
        ).hexdigest()
        sent: list[Message] = []
        given = False

        async def replay() -> Message:
            nonlocal given
            if given:  # the body was read: what comes next is the client leaving
                return await receive()
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def write() -> tuple[int, bytes, str]:
            sent.clear()

            async def keep(message: Message) -> None:
                sent.append(message)

            await self.app(scope, replay, keep)
            return _answer_of(sent)

        try:
            status, content, content_type = await state.manager.idempotent.run(
                tenant, key, fingerprint, write, owner=lambda: _owner_of(scope)
            )
        except MemMachineError as exc:
            if sent:  # the write itself failed after answering: pass its answer on
                raise
            response = await memmachine_error_response(request, exc)
            await response(scope, receive, send)
            return
        if sent:
            for message in sent:
                await send(message)
            return
        headers = [(b"content-type", content_type.encode()), (b"idempotent-replayed", b"true")]
        headers.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})


def _owner_of(scope: AsgiScope) -> Scope | None:
    """The scope the route resolved (:func:`memmachine_server.scope.resolve_scope`)."""
    found = (scope.get("state") or {}).get("memmachine_scope")
    return found if isinstance(found, Scope) else None


def _key_of(scope: AsgiScope) -> str | None:
    if scope["type"] != "http" or scope["method"] not in _WRITES:
        return None
    path = str(scope["path"])
    if not path.startswith("/v1/") or path.endswith("/search"):  # searches write nothing
        return None
    for name, value in scope.get("headers") or []:
        if name == _HEADER:
            return str(value.decode("latin-1"))
    return None


async def _tenant(state: AppState, request: Request) -> str | None:
    """The tenant the request's credentials name, or ``None`` when they name none."""
    keyring = keyring_of(state)
    presented = presented_key(request.headers)
    if not presented:
        return None if keyring.requires_key() else "default"
    try:
        await keyring.refresh_for(presented)
        return keyring.identify(presented).tenant
    except MemMachineError:
        return None


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _answer_of(sent: list[Message]) -> tuple[int, bytes, str]:
    status, content_type, body = 500, "", b""
    for message in sent:
        if message["type"] == "http.response.start":
            status = int(message["status"])
            for name, value in message.get("headers") or []:
                if name.lower() == b"content-type":
                    content_type = value.decode("latin-1")
        elif message["type"] == "http.response.body":
            body += message.get("body", b"")
    return status, body, content_type


async def idempotent_add(
    manager: MemoryManager,
    scope: Scope,
    batch: list[wire.MessageIn],
    working: bool,
    key: str,
) -> wire.AddMemoriesResponse:
    """MCP's ``add_memory`` with an idempotency key: run once per tenant and key, its episodes
    under ids derived from the key (:mod:`memmachine.memory.idempotency`)."""
    field = "idempotency_key"
    ids = episode_ids_for(scope.tenant, check_key(key, field), len(batch))
    sent = [message.model_dump(mode="json") for message in batch]
    fingerprint = hashlib.sha256(
        json.dumps(["add_memory", scope.model_dump(mode="json"), sent, working]).encode()
    ).hexdigest()

    async def write() -> tuple[int, bytes, str]:
        answer = added_out(
            scope, await manager.add_messages(scope, new_messages(batch), working=working, ids=ids)
        )
        return 200, answer.model_dump_json().encode(), "application/json"

    _, body, _ = await manager.idempotent.run(
        scope.tenant, key, fingerprint, write, field=field, owner=lambda: scope
    )
    return wire.AddMemoriesResponse.model_validate_json(body)
