"""Attachment blobs as files under a root directory (the data dir by default).

Layout::

    {root}/{sha256(tenant, org, project, user)}/{sha[:2]}/{sha}
    {root}/{sha256(tenant, org, project, user)}/{sha[:2]}/{sha}.holders/{sha256(holder)}

No id ever becomes a path component: the user's directory is a hash of its scope and a blob
key must be 64 hex digits. A blob is written to a temporary file in its directory, fsynced and
renamed into place, so a reader sees the whole blob or none. Holders are empty marker files;
the blob goes when its last holder is released. Writes are serialised per store instance.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

from memmachine.adapters.file.file_common import write_atomically
from memmachine.errors import NotFoundError, StoreError
from memmachine.models import Scope
from memmachine.ports import BlobInfo, Lifecycle

__all__ = ["FileBlobStore"]

_STORE = "blobs"
_KEY = re.compile(r"[0-9a-f]{64}")
_HOLDERS = ".holders"
_P = ParamSpec("_P")
_R = TypeVar("_R")


class FileBlobStore(Lifecycle):
    """A :class:`~memmachine.ports.BlobStore` on the local file system (see the module
    docstring)."""

    name = "file"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create blob directory: {exc.strerror}", store=_STORE) from exc

    async def close(self) -> None:
        return None

    def _user_dir(self, scope: Scope) -> Path:
        key = "\x1f".join((scope.tenant, scope.org_id, scope.project_id, scope.user_id))
        return self.root / hashlib.sha256(key.encode()).hexdigest()

    def _blob_path(self, scope: Scope, sha256: str) -> Path | None:
        if _KEY.fullmatch(sha256) is None:
            return None
        return self._user_dir(scope) / sha256[:2] / sha256

    async def put(self, scope: Scope, data: bytes, *, holder: str) -> BlobInfo:
        info = BlobInfo(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
        path = self._blob_path(scope, info.sha256)
        assert path is not None
        async with self._lock:
            await _in_thread(_write, path, data, _holder_path(path, holder))
        return info

    async def read(
        self, scope: Scope, sha256: str, *, chunk_size: int = 65_536
    ) -> AsyncIterator[bytes]:
        path = self._blob_path(scope, sha256)
        if path is None or not path.is_file():
            raise NotFoundError(f"attachment blob {sha256[:64]!r} not found")
        try:
            handle = await asyncio.to_thread(path.open, "rb")
        except OSError as exc:
            raise StoreError(f"cannot read blob: {exc.strerror}", store=_STORE) from exc
        try:
            while chunk := await asyncio.to_thread(handle.read, max(1, chunk_size)):
                yield chunk
        finally:
            handle.close()

    async def release(self, scope: Scope, sha256: str, holder: str) -> bool:
        path = self._blob_path(scope, sha256)
        if path is None:
            return False
        async with self._lock:
            return await _in_thread(_release, path, _holder_path(path, holder))

    async def forget(self, scope: Scope) -> int:
        directory = self._user_dir(scope)
        async with self._lock:
            count = await _in_thread(_count, directory)
            await _in_thread(shutil.rmtree, directory, True)
        return count

    async def count(self, scope: Scope) -> int:
        return await _in_thread(_count, self._user_dir(scope))


def _holder_path(blob: Path, holder: str) -> Path:
    return blob.with_name(blob.name + _HOLDERS) / hashlib.sha256(holder.encode()).hexdigest()


async def _in_thread(function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    try:
        return await asyncio.to_thread(function, *args, **kwargs)
    except OSError as exc:
        raise StoreError(f"blob file operation failed: {exc.strerror}", store=_STORE) from exc


def _write(path: Path, data: bytes, holder: Path) -> None:
    holder.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file():
        write_atomically(path, data)
    holder.touch()


def _release(path: Path, holder: Path) -> bool:
    if not holder.exists():
        return False
    holder.unlink()
    if any(holder.parent.iterdir()):
        return False
    holder.parent.rmdir()
    path.unlink(missing_ok=True)
    return True


def _count(directory: Path) -> int:
    if not directory.is_dir():
        return 0
    return sum(
        1
        for shard in directory.iterdir()
        if shard.is_dir()
        for entry in shard.iterdir()
        if entry.is_file() and _KEY.fullmatch(entry.name)
    )
