"""The blob port: the bytes of attachments (images, audio, documents), kept per user.

Contract of :class:`BlobStore` (checked for every adapter by ``tests/contract/test_blob_store.py``):

* Blobs are content-addressed within one user: the key is the SHA-256 of the bytes (lower-case
  hex) under the scope's tenant, org, project and user; ``agent_id``, ``session_id`` and
  ``group_id`` are ignored. The same bytes of two users are two blobs; nothing of one user is
  ever read, listed or removed through another user's scope.
* ``put(scope, data, holder=...)`` stores the bytes (atomically: a reader never sees a partial
  blob) and records ``holder`` (an episode id) as holding it; it returns the
  :class:`BlobInfo`. Putting the same bytes again adds a holder and keeps one copy.
* ``read(scope, sha256)`` yields the bytes in order in chunks of at most ``chunk_size``;
  ``NotFoundError`` when the user has no such blob (checked before the first chunk).
* ``release(scope, sha256, holder)`` drops one holder; when none is left the blob is removed
  and ``True`` returned. Releasing a holder or blob that is not there is a no-op (``False``).
* ``forget(scope)`` removes every blob of the user and returns how many there were.
* ``count(scope)`` is how many blobs the user holds.
* A failing backend raises :class:`~memmachine.errors.StoreError` naming the store ``blobs``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from memmachine.models import Scope

__all__ = ["ATTACHMENT_KEY", "AttachmentFetcher", "BlobInfo", "BlobStore", "MediaDescriber"]

#: The episode metadata key that links an episode to its source attachment: a JSON object with
#: ``id``, ``mime``, ``size``, ``sha256`` (the blob's key), ``name`` and ``described_by``. The
#: episode's id holds the blob (:meth:`BlobStore.put`'s ``holder``).
ATTACHMENT_KEY = "attachment"


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """A stored blob: its SHA-256 (lower-case hex) and its size in bytes."""

    sha256: str
    size: int


@runtime_checkable
class BlobStore(Protocol):
    """Attachment bytes per user, content-addressed (see the module docstring)."""

    name: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def put(self, scope: Scope, data: bytes, *, holder: str) -> BlobInfo: ...
    def read(
        self, scope: Scope, sha256: str, *, chunk_size: int = 65_536
    ) -> AsyncIterator[bytes]: ...
    async def release(self, scope: Scope, sha256: str, holder: str) -> bool: ...
    async def forget(self, scope: Scope) -> int: ...
    async def count(self, scope: Scope) -> int: ...


@runtime_checkable
class MediaDescriber(Protocol):
    """Turns an image or a recording into text a search can find.

    Contract: ``accepts(mime)`` says whether the configured model takes that modality
    (``image/*`` for a vision chat model, ``audio/*`` for a transcription model);
    ``describe(data, mime)`` is only called for an accepted type and returns non-empty text
    (a description of the image, the transcript of the audio). A failing endpoint raises
    :class:`~memmachine.errors.StoreError` naming the store ``llm`` and never the API key.
    """

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    def accepts(self, mime: str) -> bool: ...
    async def describe(self, data: bytes, mime: str, *, name: str | None = None) -> str: ...


@runtime_checkable
class AttachmentFetcher(Protocol):
    """Fetches an attachment given by URL.

    Contract: ``fetch(url, max_bytes=..., field=...)`` returns the body and the response's
    MIME type (without parameters; ``None`` when the server sent none). Only ``http`` and
    ``https`` URLs are fetched, redirects are not followed, and at most ``max_bytes`` are read:
    a longer body raises :class:`~memmachine.errors.PayloadTooLargeError`, any other failure
    (bad URL, refused host, error status, unreachable server) an
    :class:`~memmachine.errors.InvalidInputError`; both name ``field``.
    """

    async def fetch(self, url: str, *, max_bytes: int, field: str) -> tuple[bytes, str | None]: ...
