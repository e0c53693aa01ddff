"""Attachments: the blob store episodes release their blobs to, and the service that takes
attachments in (with the model that describes them and the URL fetcher, when configured)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from memmachine.config import Settings, redact_url
from memmachine.errors import ConfigurationError
from memmachine.manager import MemoryManager
from memmachine.ports import BlobStore

if TYPE_CHECKING:
    from memmachine.memory.attachments import AttachmentService

__all__ = ["attach_blob_store", "blob_address", "build_attachments", "build_blob_store"]

_BLOB_URL = "MEMMACHINE_BLOB_URL"


def attach_blob_store(settings: Settings, manager: MemoryManager) -> BlobStore:
    """The manager's blob store; the one of :func:`build_blob_store` is given to it first if
    it has none."""
    blobs = manager.episodic_service.blobs
    if blobs is None:
        blobs = build_blob_store(settings)
        manager.episodic_service.blobs = blobs
    return blobs


def build_blob_store(settings: Settings) -> BlobStore:
    """The blob store (not started): an S3-compatible bucket with
    ``MEMMACHINE_BLOB_URL=s3://bucket/prefix`` (the ``s3`` extra), else a
    :class:`FileBlobStore` under ``attachments.blob_dir`` (default ``<data dir>/blobs``)."""
    config = settings.blob
    url = (config.url or "").strip()
    if not url:
        from memmachine.adapters.file.file_blob_store import FileBlobStore

        root = settings.attachments.blob_dir or settings.data_dir / "blobs"
        return FileBlobStore(root.expanduser().resolve())
    bucket, prefix = _bucket_and_prefix(url)
    key_id = config.access_key_id.get_secret_value() if config.access_key_id else None
    secret = config.secret_access_key.get_secret_value() if config.secret_access_key else None
    if bool(key_id) != bool(secret):
        raise ConfigurationError(
            "MEMMACHINE_BLOB_ACCESS_KEY_ID and MEMMACHINE_BLOB_SECRET_ACCESS_KEY go together: "
            "set both, or neither to use the standard AWS chain"
        )
    try:
        from memmachine.adapters.s3.s3_blob_store import S3BlobStore
    except ImportError as exc:
        raise ConfigurationError(
            f"{_BLOB_URL}={url}: the S3 blob store is not installed ({exc.name} is missing): "
            "install memmachine-service[s3] (or memmachine-core[s3])"
        ) from None
    return S3BlobStore(
        bucket,
        prefix,
        endpoint_url=(config.endpoint_url or "").strip() or None,
        region=(config.region or "").strip() or None,
        access_key_id=key_id or None,
        secret_access_key=secret or None,
        path_style=config.path_style,
        timeout_seconds=settings.store_timeout_seconds,
        setting=f"{_BLOB_URL}={url}",
    )


def blob_address(settings: Settings) -> str:
    """Where the blob store is, for startup messages."""
    url = (settings.blob.url or "").strip()
    if url:
        return f"{url} at {(settings.blob.endpoint_url or '').strip() or 'AWS S3'}"
    root = settings.attachments.blob_dir or settings.data_dir / "blobs"
    return str(root.expanduser().resolve())


def _bucket_and_prefix(url: str) -> tuple[str, str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = urlsplit("")
    bucket = parts.netloc
    if parts.scheme.lower() != "s3" or not bucket or "@" in bucket or parts.query:
        raise ConfigurationError(
            f"{_BLOB_URL}: {redact_url(url)!r} is not s3://bucket or s3://bucket/prefix "
            "(credentials go in MEMMACHINE_BLOB_ACCESS_KEY_ID / _SECRET_ACCESS_KEY; leave it "
            "unset to keep blobs in the data dir)"
        )
    return bucket, parts.path.strip("/")


def build_attachments(settings: Settings, manager: MemoryManager) -> AttachmentService:
    """The attachment service of ``manager``. Images are described by
    ``attachments.vision_model`` and audio by ``attachments.transcription_model`` at the LLM
    endpoint (``MEMMACHINE_LLM_BASE_URL`` / ``_API_KEY``) when set; URLs are fetched only with
    ``attachments.fetch_urls``. Close it with ``close()``."""
    from memmachine.memory.attachments import AttachmentService

    options = settings.attachments
    llm = settings.llm
    key = llm.api_key.get_secret_value() if llm.api_key is not None else None
    describer = None
    if (options.vision_model or options.transcription_model) and (llm.base_url or key):
        from memmachine.adapters.openai.openai_media_describer import OpenAIMediaDescriber

        describer = OpenAIMediaDescriber(
            llm.base_url,
            api_key=key,
            vision_model=options.vision_model,
            transcription_model=options.transcription_model,
            timeout=llm.timeout_seconds,
            max_retries=llm.max_retries,
        )
    fetcher = None
    if options.fetch_urls:
        from memmachine.adapters.http.http_attachment_fetcher import HttpAttachmentFetcher

        fetcher = HttpAttachmentFetcher(
            hosts=options.url_hosts, timeout=options.fetch_timeout_seconds
        )
    return AttachmentService(
        blobs=attach_blob_store(settings, manager),
        gate=manager.gate,
        settings=options,
        describer=describer,
        fetcher=fetcher,
    )
