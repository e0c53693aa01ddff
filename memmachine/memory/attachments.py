"""Attachments: images, audio and documents that come with messages.

Each attachment is checked (size, type), kept in the blob store under its user, described
(the caller's caption, the text of a plain document, or the configured model for its
modality) and stored as an episode of its own whose content is that description, linked to
its source by ``metadata["attachment"]`` (:data:`~memmachine.ports.ATTACHMENT_KEY`). The
description passes the write gate like any message. Deleting the episode releases its blob
(:class:`~memmachine.adapters.attached.attached_episode_store.AttachedEpisodeStore`).

An add with an idempotency key gives the ids of its episodes (derived from the tenant and
the key, :func:`~memmachine.memory.idempotency.episode_ids_for`); the blobs are held under
those ids and the links named after them, so a retry puts the same holders again (a no-op)
and finds the episodes an earlier attempt stored instead of storing them twice. Blobs kept
for a store that failed are released only when nothing can have been stored under their
holders: never for a keyed add (an earlier or later attempt may hold them), nor after
"outcome unknown".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import mimetypes
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_to_bytes

from memmachine.config import AttachmentSettings
from memmachine.errors import (
    InvalidInputError,
    NotFoundError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
    WriteOutcomeUnknownError,
)
from memmachine.memory.common import require_session
from memmachine.models import Episode, NewMessage, Scope
from memmachine.ports import ATTACHMENT_KEY, AttachmentFetcher, BlobStore, MediaDescriber
from memmachine.safety.gate import WriteGate

__all__ = [
    "AttachedMessage",
    "AttachmentInput",
    "AttachmentService",
    "StoreMessages",
    "episode_count",
]

#: Stores messages as episodes with the given ids (the facade's ``add_messages``).
StoreMessages = Callable[[list[NewMessage], list[str]], Awaitable[list[Episode]]]


@dataclass(frozen=True, slots=True)
class AttachmentInput:
    """One attachment as a caller gave it: exactly one of ``data`` (uploaded bytes),
    ``data_uri`` or ``url``; ``mime`` is required for ``data`` unless ``name`` implies it."""

    data: bytes | None = None
    data_uri: str | None = None
    url: str | None = None
    mime: str | None = None
    name: str | None = None
    caption: str | None = None
    #: The caller's names for ``data``, ``data_uri``, ``url``, ``mime`` and ``caption`` in
    #: errors (an upload's ``file``); by default ``messages.<i>.attachments.<j>.<part>``.
    fields: Mapping[str, str] = field(default_factory=dict)

    def field_of(self, where: str, part: str) -> str:
        return self.fields.get(part, f"{where}.{part}")


@dataclass(frozen=True, slots=True)
class AttachedMessage:
    """A message and its attachments. ``message`` is stored as usual when ``with_text``;
    each attachment becomes an episode after it with the message's role and producer."""

    message: NewMessage
    attachments: Sequence[AttachmentInput] = field(default_factory=tuple)
    with_text: bool = True


def episode_count(messages: Sequence[AttachedMessage]) -> int:
    """How many episodes :meth:`AttachmentService.add` stores for ``messages``."""
    return sum(int(item.with_text) + len(item.attachments) for item in messages)


#: The namespace of attachment link ids, each derived from its episode's id.
_LINKS = uuid.UUID("6f1c3a52-8e0b-4d7f-9a64-3b2e5d1c7a90")


class AttachmentService:
    """Takes attachments in and hands their bytes back (see the module docstring).

    ``describer`` describes the modalities it accepts; ``fetcher`` fetches URLs (``None``:
    URLs are refused)."""

    def __init__(
        self,
        *,
        blobs: BlobStore,
        gate: WriteGate,
        settings: AttachmentSettings,
        describer: MediaDescriber | None = None,
        fetcher: AttachmentFetcher | None = None,
    ) -> None:
        self.blobs = blobs
        self.settings = settings
        self.describer = describer
        self.fetcher = fetcher
        self._gate = gate

    async def add(
        self,
        scope: Scope,
        messages: Sequence[AttachedMessage],
        store: StoreMessages,
        *,
        ids: Sequence[str] | None = None,
    ) -> list[Episode]:
        """Check and describe every attachment, keep their blobs, then ``store`` the messages
        and descriptions as episodes (in order), under ``ids`` when given (an idempotency
        key's: one per episode, :func:`episode_count`) or else new ones. All or nothing: a
        bad attachment stores nothing (a 4xx naming ``messages.<i>.attachments.<j>``), and
        blobs kept for a ``store`` that fails are released (see the module docstring)."""
        scope = require_session(scope)
        count = episode_count(messages)
        if ids is not None and len(ids) != count:
            raise ValueError(f"{len(ids)} ids given for {count} episodes")
        names = iter(ids if ids is not None else [str(uuid.uuid4()) for _ in range(count)])
        planned: list[NewMessage] = []
        chosen: list[str] = []
        blobs: list[tuple[str, bytes]] = []
        for index, item in enumerate(messages):
            if item.with_text:
                planned.append(item.message)
                chosen.append(next(names))
            for position, attachment in enumerate(item.attachments):
                where = f"messages.{index}.attachments.{position}"
                data, mime = await self._load(attachment, where)
                text, described_by = await self._describe(attachment, data, mime, where)
                episode_id = next(names)
                link = {
                    "id": str(uuid.uuid5(_LINKS, episode_id)),
                    "mime": mime,
                    "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "name": attachment.name,
                    "described_by": described_by,
                }
                metadata = {**item.message.metadata, ATTACHMENT_KEY: link}
                planned.append(
                    item.message.model_copy(update={"content": text, "metadata": metadata})
                )
                chosen.append(episode_id)
                blobs.append((episode_id, data))
        if not planned:
            raise InvalidInputError("at least one message is required", field="messages")
        self._gate.check_messages(planned)
        kept: list[tuple[str, str]] = []
        try:
            for holder, data in blobs:
                info = await self.blobs.put(scope, data, holder=holder)
                kept.append((info.sha256, holder))
            return await store(planned, chosen)
        except BaseException as failed:
            if ids is None and not isinstance(failed, WriteOutcomeUnknownError):
                for sha256, holder in kept:
                    await self.blobs.release(scope, sha256, holder)
            raise

    async def close(self) -> None:
        """Close the describing model's client."""
        if self.describer is not None:
            await self.describer.close()

    def download(self, episode: Episode) -> tuple[dict[str, Any], AsyncIterator[bytes]]:
        """The attachment of an episode (its link metadata) and its bytes, streamed;
        ``NotFoundError`` when the episode has none."""
        link = episode.metadata.get(ATTACHMENT_KEY)
        if not isinstance(link, dict) or not isinstance(link.get("sha256"), str):
            raise NotFoundError(f"episode {episode.id!r} has no attachment")
        return link, self.blobs.read(episode.scope, link["sha256"])

    async def _load(self, attachment: AttachmentInput, where: str) -> tuple[bytes, str]:
        """The attachment's bytes and MIME type, checked against the size limit and the
        allow-list."""
        limit = self.settings.max_bytes
        given = [
            name
            for name, value in (
                ("data", attachment.data),
                ("data_uri", attachment.data_uri),
                ("url", attachment.url),
            )
            if value is not None
        ]
        if len(given) != 1:
            raise InvalidInputError("give exactly one of data, data_uri or url", field=where)
        mime = attachment.mime
        if attachment.data is not None:
            data = attachment.data
            source = attachment.field_of(where, "data")
        elif attachment.data_uri is not None:
            source = attachment.field_of(where, "data_uri")
            data, uri_mime = _decode_data_uri(attachment.data_uri, limit, source)
            mime = mime or uri_mime
        else:
            source = attachment.field_of(where, "url")
            if self.fetcher is None or not self.settings.fetch_urls:
                raise InvalidInputError(
                    "fetching attachments by URL is off (MEMMACHINE_ATTACHMENTS_FETCH_URLS)",
                    field=source,
                )
            assert attachment.url is not None
            data, url_mime = await self.fetcher.fetch(attachment.url, max_bytes=limit, field=source)
            mime = mime or url_mime
        if len(data) > limit:
            raise PayloadTooLargeError(
                f"the attachment has {len(data)} bytes; the limit is {limit}", field=source
            )
        if not data:
            raise InvalidInputError("the attachment is empty", field=source)
        if mime is None and attachment.name:
            mime = mimetypes.guess_type(attachment.name, strict=False)[0]
        kind = (mime or "").split(";")[0].strip().lower()
        if kind not in self.settings.allowed_types:
            raise UnsupportedMediaTypeError(
                f"attachment type {kind or 'unknown'!r} is not accepted; accepted: "
                f"{', '.join(self.settings.allowed_types)}",
                field=attachment.field_of(where, "mime"),
            )
        return data, kind

    async def _describe(
        self, attachment: AttachmentInput, data: bytes, mime: str, where: str
    ) -> tuple[str, str]:
        """The text indexed for the attachment and where it came from."""
        limit = self._gate.limits.max_message_chars
        caption = (attachment.caption or "").strip()
        if caption:
            if len(caption) > limit:
                raise PayloadTooLargeError(
                    f"the caption has {len(caption)} characters; the limit is {limit}",
                    field=attachment.field_of(where, "caption"),
                )
            return caption, "caption"
        if mime.startswith("text/"):
            text = data.decode("utf-8", errors="replace").strip()
            if text:
                return text[:limit], "text"
        if self.describer is not None and self.describer.accepts(mime):
            text = await self.describer.describe(data, mime, name=attachment.name)
            return text[:limit], "model"
        raise InvalidInputError(
            f"no configured model describes {mime}: give the attachment a caption",
            field=attachment.field_of(where, "caption"),
        )


def _decode_data_uri(uri: str, limit: int, field: str) -> tuple[bytes, str | None]:
    """The bytes and MIME type of a ``data:`` URI (RFC 2397)."""
    if not uri.startswith("data:") or "," not in uri:
        raise InvalidInputError("not a data: URI", field=field)
    header, payload = uri[5:].split(",", 1)
    parameters = header.split(";")
    encoded = parameters[-1].strip().lower() == "base64"
    # Refuse before decoding something far too large: base64 takes 4 characters per 3 bytes,
    # percent-encoding up to 3 per byte.
    if len(payload) > (limit * 4 // 3 + 4 if encoded else limit * 3):
        raise PayloadTooLargeError(f"the attachment is larger than {limit} bytes", field=field)
    try:
        if encoded:
            parameters.pop()
            data = base64.b64decode(payload, validate=True)
        else:
            data = unquote_to_bytes(payload)
    except (binascii.Error, ValueError):
        raise InvalidInputError("the data: URI is not valid base64", field=field) from None
    return data, (parameters[0].strip() or None)
