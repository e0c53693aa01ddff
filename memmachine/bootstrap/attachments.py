"""Attachments: the blob store episodes release their blobs to, and the service that takes
attachments in (with the model that describes them and the URL fetcher, when configured)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memmachine.config import Settings
from memmachine.manager import MemoryManager
from memmachine.ports import BlobStore

if TYPE_CHECKING:
    from memmachine.memory.attachments import AttachmentService

__all__ = ["attach_blob_store", "build_attachments"]


def attach_blob_store(settings: Settings, manager: MemoryManager) -> BlobStore:
    """The manager's blob store; a :class:`FileBlobStore` under ``attachments.blob_dir``
    (default ``<data dir>/blobs``) is given to it first if it has none."""
    blobs = manager.episodic_service.blobs
    if blobs is None:
        from memmachine.adapters.file.file_blob_store import FileBlobStore

        root = settings.attachments.blob_dir or settings.data_dir / "blobs"
        blobs = FileBlobStore(root.expanduser().resolve())
        manager.episodic_service.blobs = blobs
    return blobs


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
