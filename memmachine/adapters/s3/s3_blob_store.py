"""Attachment blobs as objects in a bucket of any S3-compatible service (AWS S3, MinIO, R2,
Ceph, ...).

Layout, under the configured key prefix::

    {prefix}/{t}/{o}/{p}/{u}/{sha}
    {prefix}/{t}/{o}/{p}/{u}/{sha}.holders/{sha256(holder)}

where ``t``, ``o``, ``p`` and ``u`` are hashes of the scope's tenant, of tenant and org, of
tenant, org and project, and of tenant, org, project and user (the first 32 hex digits of
their SHA-256). No id is ever written into a key, and a user's objects all live under one
prefix, so forgetting a user is one listing and batch deletes of that prefix. A blob key must
be 64 hex digits. An S3 ``PUT`` is atomic, so a reader sees the whole blob or none; holders
are empty marker objects and the blob goes when its last holder is released.

Puts and releases of one blob are serialised per store instance. Between replicas sharing a
bucket, a put racing the release of the last holder of the same bytes of the same user can
still lose the blob (S3 has no transaction spanning two keys): the put writes its holder
marker before the blob, and writes the blob even when it is there already, to keep that
window narrow.

The client is boto3's, each call run in a worker thread. boto3 clients are thread-safe, and
this keeps the extra to boto3 alone: aiobotocore pins one exact botocore release range and
brings aiohttp, which would couple this install's upgrades to its release cadence, while
attachments are small (``MEMMACHINE_ATTACHMENTS_MAX_BYTES``) and a blob call is one request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, ParamSpec, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from memmachine.errors import (
    ConfigurationError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
)
from memmachine.models import Scope
from memmachine.ports import BlobInfo, Lifecycle

__all__ = ["S3BlobStore"]

_STORE = "blobs"
_KEY = re.compile(r"[0-9a-f]{64}")
_HOLDERS = ".holders/"
_MISSING = frozenset({"404", "NoSuchKey", "NotFound"})
_NO_BUCKET = frozenset({"NoSuchBucket"})
_DENIED = frozenset({"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"})
_BUSY = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout"})
#: Keys one listing page or ``DeleteObjects`` request holds at most (the S3 limit).
_PAGE = 1000
_P = ParamSpec("_P")
_R = TypeVar("_R")


class S3BlobStore(Lifecycle):
    """A :class:`~memmachine.ports.BlobStore` in an S3-compatible bucket (see the module
    docstring).

    ``endpoint_url`` is the service's URL (unset: AWS S3 in ``region``); ``path_style`` puts
    the bucket in the path instead of the host name (MinIO and most self-hosted services
    need it). Without ``access_key_id`` and ``secret_access_key`` the standard AWS chain is
    used (``AWS_*`` variables, shared config files, instance or task roles). ``setting`` is
    what a startup error names so the operator knows what to fix; ``page_size`` is how many
    keys a listing page and a batch delete hold (at most S3's 1000).
    """

    name = "s3"

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        path_style: bool = False,
        timeout_seconds: float = 10.0,
        setting: str = "the blob store",
        page_size: int = _PAGE,
    ) -> None:
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        self.setting = setting
        self.page_size = max(1, min(page_size, _PAGE))
        self._session_options = {
            "aws_access_key_id": access_key_id,
            "aws_secret_access_key": secret_access_key,
            "region_name": region,
        }
        # Other services than AWS's may refuse the checksum headers botocore sends by
        # default since 1.36 (Backblaze, older MinIO...): send them only when the operation
        # requires one.
        checksums = "when_required" if endpoint_url else "when_supported"
        self._config = Config(
            s3={"addressing_style": "path" if path_style else "auto"},
            connect_timeout=timeout_seconds,
            read_timeout=timeout_seconds,
            retries={"max_attempts": 3, "mode": "standard"},
            request_checksum_calculation=checksums,
            response_checksum_validation=checksums,
        )
        self._client: Any = None
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    async def start(self) -> None:
        """Open the client and check that the bucket is there and may be used: a missing
        bucket, refused credentials or none at all are a :class:`ConfigurationError` naming
        ``setting``; an unreachable service is a :class:`StoreUnavailableError` (startup
        tries again)."""
        if self._client is None:
            self._client = await asyncio.to_thread(self._make_client)
        try:
            await asyncio.to_thread(self._client.head_bucket, Bucket=self.bucket)
        except NoCredentialsError:
            raise ConfigurationError(
                f"{self.setting}: no credentials for bucket {self.bucket!r} (set an access "
                "key, or provide one through the standard AWS chain)"
            ) from None
        except ClientError as exc:
            code = _code(exc)
            if code in _MISSING | _NO_BUCKET:
                raise ConfigurationError(
                    f"{self.setting}: bucket {self.bucket!r} does not exist at "
                    f"{self._where()} (create it, or name another)"
                ) from None
            if code in _DENIED:
                raise ConfigurationError(
                    f"{self.setting}: access to bucket {self.bucket!r} at {self._where()} "
                    f"was refused ({code}): check the credentials"
                ) from None
            raise _translated(exc) from None
        except BotoCoreError as exc:
            raise _translated(exc) from None

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await asyncio.to_thread(client.close)

    def _make_client(self) -> Any:
        session = boto3.session.Session(**self._session_options)
        return session.client("s3", endpoint_url=self.endpoint_url, config=self._config)

    def _where(self) -> str:
        return self.endpoint_url or "AWS S3"

    def _user_prefix(self, scope: Scope) -> str:
        parts = (scope.tenant, scope.org_id, scope.project_id, scope.user_id)
        levels = [
            hashlib.sha256("\x1f".join(parts[:depth]).encode()).hexdigest()[:32]
            for depth in range(1, len(parts) + 1)
        ]
        return self.prefix + "/".join(levels) + "/"

    def _blob_key(self, scope: Scope, sha256: str) -> str | None:
        if _KEY.fullmatch(sha256) is None:
            return None
        return self._user_prefix(scope) + sha256

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    async def _call(self, method: str, **arguments: Any) -> Any:
        if self._client is None:  # used without start(): open the client, check nothing
            self._client = await asyncio.to_thread(self._make_client)
        return await _in_thread(getattr(self._client, method), **arguments)

    async def put(self, scope: Scope, data: bytes, *, holder: str) -> BlobInfo:
        info = BlobInfo(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
        key = self._blob_key(scope, info.sha256)
        assert key is not None
        marker = _holder_key(key, holder)
        async with self._lock(key):
            await self._call("put_object", Bucket=self.bucket, Key=marker, Body=b"")
            try:
                await self._call(
                    "put_object",
                    Bucket=self.bucket,
                    Key=key,
                    Body=data,
                    ContentType="application/octet-stream",
                )
            except BaseException:
                await self._forget_marker(marker)
                raise
        return info

    async def _forget_marker(self, marker: str) -> None:
        # the put has failed already: its error is the one to report
        with contextlib.suppress(StoreError):
            await self._call("delete_object", Bucket=self.bucket, Key=marker)

    async def read(
        self, scope: Scope, sha256: str, *, chunk_size: int = 65_536
    ) -> AsyncIterator[bytes]:
        key = self._blob_key(scope, sha256)
        if key is None:
            raise NotFoundError(f"attachment blob {sha256[:64]!r} not found")
        try:
            answer = await self._call("get_object", Bucket=self.bucket, Key=key)
        except _Missing:
            raise NotFoundError(f"attachment blob {sha256!r} not found") from None
        body = answer["Body"]
        try:
            while chunk := await _in_thread(body.read, max(1, chunk_size)):
                yield chunk
        finally:
            body.close()

    async def release(self, scope: Scope, sha256: str, holder: str) -> bool:
        key = self._blob_key(scope, sha256)
        if key is None:
            return False
        marker = _holder_key(key, holder)
        async with self._lock(key):
            try:
                await self._call("head_object", Bucket=self.bucket, Key=marker)
            except _Missing:
                return False
            await self._call("delete_object", Bucket=self.bucket, Key=marker)
            left = await self._call(
                "list_objects_v2", Bucket=self.bucket, Prefix=key + _HOLDERS, MaxKeys=1
            )
            if left.get("KeyCount", 0):
                return False
            await self._call("delete_object", Bucket=self.bucket, Key=key)
            return True

    async def forget(self, scope: Scope) -> int:
        """Delete every object under the user's prefix, one batch delete per page of the
        listing (``page_size`` keys)."""
        prefix = self._user_prefix(scope)
        blobs = 0
        for page in await self._pages(prefix):
            if not page:
                continue
            keys = [entry["Key"] for entry in page]
            blobs += sum(1 for key in keys if _KEY.fullmatch(key[len(prefix) :]))
            answer = await self._call(
                "delete_objects",
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True},
            )
            if answer.get("Errors"):
                raise StoreError(
                    f"S3 refused to delete {len(answer['Errors'])} blob object(s) "
                    f"({answer['Errors'][0].get('Code')})",
                    store=_STORE,
                )
        return blobs

    async def count(self, scope: Scope) -> int:
        prefix = self._user_prefix(scope)
        pages = await self._pages(prefix, delimiter="/")
        return sum(
            1 for page in pages for entry in page if _KEY.fullmatch(entry["Key"][len(prefix) :])
        )

    async def _pages(self, prefix: str, *, delimiter: str | None = None) -> list[list[Any]]:
        """Every object under ``prefix`` (directly under it with ``delimiter``), by page."""
        options: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": prefix,
            "MaxKeys": self.page_size,
        }
        if delimiter is not None:
            options["Delimiter"] = delimiter
        pages: list[list[Any]] = []
        while True:
            answer = await self._call("list_objects_v2", **options)
            pages.append(answer.get("Contents", []))
            if not answer.get("IsTruncated"):
                return pages
            options["ContinuationToken"] = answer["NextContinuationToken"]


class _Missing(NotFoundError):
    """The object asked for is not in the bucket (caught inside this module)."""


def _holder_key(blob_key: str, holder: str) -> str:
    return blob_key + _HOLDERS + hashlib.sha256(holder.encode()).hexdigest()


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _translated(exc: Exception) -> StoreError:
    """The error tree's view of a botocore failure (no bucket or key names in it)."""
    if isinstance(exc, ClientError):
        code = _code(exc)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code in _BUSY or (isinstance(status, int) and status >= 500):
            return StoreUnavailableError(f"S3 is unavailable ({code or status})", store=_STORE)
        return StoreError(f"S3 refused the request ({code or status})", store=_STORE)
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return StoreUnavailableError(
            f"S3 endpoint unreachable ({type(exc).__name__})", store=_STORE
        )
    return StoreError(f"S3 request failed ({type(exc).__name__})", store=_STORE)


async def _in_thread(function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    try:
        return await asyncio.to_thread(function, *args, **kwargs)
    except ClientError as exc:
        if _code(exc) in _MISSING:
            raise _Missing("no such object") from None
        raise _translated(exc) from None
    except BotoCoreError as exc:
        raise _translated(exc) from None
