"""Attachments of messages: uploaded as multipart (``POST /v1/memories/attachments``) or
given inline with ``POST /v1/memories`` (a data URI or URL per attachment), and downloaded
from the episode that describes them (``GET /v1/memories/{episode_id}/attachment``)."""

from __future__ import annotations

import mimetypes
from collections.abc import AsyncIterator
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import StreamingResponse

from memmachine.errors import PayloadTooLargeError
from memmachine.manager import MemoryManager
from memmachine.memory.attachments import (
    AttachedMessage,
    AttachmentInput,
    AttachmentService,
    episode_count,
)
from memmachine.memory.idempotency import IDEMPOTENCY_HEADER, episode_ids_for
from memmachine.memory.repeats import Added
from memmachine.models import Episode, NewMessage, Scope
from memmachine_sdk import models as wire
from memmachine_server.convert import added_out, new_messages
from memmachine_server.openapi import AUTH_ERRORS, errors, scope_parameters
from memmachine_server.scope import ReadTenant, WriteTenant, resolve_scope
from memmachine_server.state import app_state, manager_of

__all__ = ["add_messages", "router"]

router = APIRouter(prefix="/v1/memories", tags=["memories"], responses=AUTH_ERRORS)
Manager = Annotated[MemoryManager, Depends(manager_of)]
_CHUNK = 65_536


def attachments_of(request: Request) -> AttachmentService:
    service = app_state(request).attachments
    assert service is not None, "the app state is built with its attachment service"
    return service


Attachments = Annotated[AttachmentService, Depends(attachments_of)]


async def add_messages(
    request: Request,
    manager: MemoryManager,
    scope: Scope,
    body: wire.AddMemoriesRequest,
    *,
    key: str | None = None,
) -> Added:
    """``body.messages`` stored as episodes (under ids derived from the idempotency ``key``
    when given); with attachments, each described and stored after its message (see
    :class:`AttachmentService`), every episode new (they are stored under ids given)."""
    messages = new_messages(body.messages)
    if not any(message.attachments for message in body.messages):
        ids = None if key is None else episode_ids_for(scope.tenant, key, len(messages))
        return await manager.add_messages(scope, messages, working=body.working, ids=ids)
    attached = [
        AttachedMessage(
            message,
            [
                AttachmentInput(
                    data_uri=item.data_uri,
                    url=item.url,
                    mime=item.mime,
                    name=item.name,
                    caption=item.caption,
                )
                for item in given.attachments
            ],
        )
        for message, given in zip(messages, body.messages, strict=True)
    ]

    async def store(planned: list[NewMessage], ids: list[str]) -> list[Episode]:
        return await manager.add_messages(scope, planned, working=body.working, ids=ids)

    stored = await attachments_of(request).add(
        scope, attached, store, ids=_keyed_ids(scope, key, attached)
    )
    return Added(stored, stored)


def _keyed_ids(scope: Scope, key: str | None, attached: list[AttachedMessage]) -> list[str] | None:
    """The ids of an attachment add's episodes derived from its idempotency ``key``."""
    if key is None:
        return None
    return episode_ids_for(scope.tenant, key, episode_count(attached))


@router.post(
    "/attachments",
    status_code=201,
    response_model=wire.AddMemoriesResponse,
    responses=errors(403, 413, 415, 422),
    dependencies=[scope_parameters()],
)
async def upload_attachment(
    request: Request,
    tenant: WriteTenant,
    manager: Manager,
    attachments: Attachments,
    file: Annotated[UploadFile, File(description="The image, recording or document.")],
    caption: Annotated[str | None, Form(), wire.Checked] = None,
    role: Annotated[wire.Role, Form()] = "user",
    producer: Annotated[str | None, Form(max_length=256), wire.Checked] = None,
    working: Annotated[bool, Form()] = True,
) -> wire.AddMemoriesResponse:
    """Upload an attachment (multipart): it is stored, described (``caption``, a plain
    document's text or the configured model) and indexed as an episode of the session."""
    scope = resolve_scope(request, tenant, require_session=True)
    limit = attachments.settings.max_bytes
    data = await file.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLargeError(f"the file is larger than {limit} bytes", field="file")
    mime = file.content_type
    if not mime or mime == "application/octet-stream":
        mime = mimetypes.guess_type(file.filename or "", strict=False)[0] or mime
    message = NewMessage(role=role, content="", producer=producer)
    names = {"data": "file", "mime": "file", "caption": "caption"}
    given = AttachmentInput(data=data, mime=mime, name=file.filename, caption=caption, fields=names)

    async def store(planned: list[NewMessage], ids: list[str]) -> list[Episode]:
        return await manager.add_messages(scope, planned, working=working, ids=ids)

    attached = [AttachedMessage(message, [given], False)]
    key = request.headers.get(IDEMPOTENCY_HEADER)
    stored = await attachments.add(scope, attached, store, ids=_keyed_ids(scope, key, attached))
    return added_out(scope, Added(stored, stored))


@router.get(
    "/{episode_id}/attachment",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The bytes."},
        **errors(403, 404, 422),
    },
    dependencies=[scope_parameters()],
)
async def download_attachment(
    episode_id: str,
    request: Request,
    tenant: ReadTenant,
    manager: Manager,
    attachments: Attachments,
) -> StreamingResponse:
    """The bytes of the attachment an episode describes (404 when it has none)."""
    scope = resolve_scope(request, tenant)
    link, chunks = attachments.download(await manager.get_episode(scope, episode_id))
    first = await anext(chunks, b"")  # a missing blob is a 404 before anything is sent

    async def body() -> AsyncIterator[bytes]:
        yield first
        async for chunk in chunks:
            yield chunk

    name = str(link.get("name") or link.get("id") or "attachment")
    return StreamingResponse(
        body(),
        media_type=str(link.get("mime") or "application/octet-stream"),
        headers={
            "Content-Length": str(link.get("size", "")),
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name)}",
            "X-Content-Type-Options": "nosniff",
        },
    )
