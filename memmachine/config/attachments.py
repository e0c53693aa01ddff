"""Attachments of messages: limits, accepted types, URL fetching and the models that describe
them (``MEMMACHINE_ATTACHMENTS_*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from memmachine.config.sources import Section, split_list

__all__ = ["DEFAULT_ATTACHMENT_TYPES", "AttachmentSettings", "BlobSettings"]

#: Images a vision model reads, audio a transcription model takes, and plain documents.
DEFAULT_ATTACHMENT_TYPES = (
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "audio/mpeg",
    "audio/mp4",
    "audio/ogg",
    "audio/wav",
    "audio/webm",
    "text/plain",
    "text/markdown",
    "application/pdf",
)


class AttachmentSettings(Section):
    """How attachments are taken in. ``allowed_types`` and ``url_hosts`` take a JSON list or a
    comma-separated string."""

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_ATTACHMENTS_", extra="ignore")
    yaml_section: ClassVar[str | None] = "attachments"

    #: The largest attachment accepted, in bytes (a larger one is refused with HTTP 413).
    max_bytes: int = Field(default=5 * 1024 * 1024, ge=1)
    #: The MIME types accepted (anything else is refused with HTTP 415).
    allowed_types: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_ATTACHMENT_TYPES)
    )
    #: Fetch attachments given by ``http(s)`` URL. Off by default: the server would make
    #: requests on a caller's behalf.
    fetch_urls: bool = False
    #: With ``fetch_urls``, only these host names (empty: any host).
    url_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    fetch_timeout_seconds: float = Field(default=20.0, gt=0)
    #: Where blobs are kept when ``MEMMACHINE_BLOB_URL`` is unset; unset: ``<data dir>/blobs``.
    blob_dir: Path | None = None
    #: The vision chat model that describes images, at the LLM endpoint (``MEMMACHINE_LLM_*``);
    #: unset: images need a caption.
    vision_model: str | None = None
    #: The transcription model (``/audio/transcriptions``) at the LLM endpoint; unset: audio
    #: needs a caption.
    transcription_model: str | None = None

    @field_validator("allowed_types", "url_hosts", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return split_list(value)

    @field_validator("allowed_types")
    @classmethod
    def _lower(cls, value: list[str]) -> list[str]:
        return [kind.strip().lower() for kind in value if kind.strip()]


class BlobSettings(Section):
    """Where attachment blobs are kept (``MEMMACHINE_BLOB_*``): files under
    ``MEMMACHINE_ATTACHMENTS_BLOB_DIR`` by default, an S3-compatible bucket with ``url``
    (needs the ``s3`` extra). Replicas of one deployment must share the blob store."""

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_BLOB_", extra="ignore")
    yaml_section: ClassVar[str | None] = "blob"

    #: ``s3://bucket/prefix``: blobs in that bucket, every key under the prefix; unset:
    #: files in the data dir.
    url: str | None = None
    #: The S3-compatible service (``http://minio:9000``, an R2 account URL, ...); unset: AWS
    #: S3 in ``region``.
    endpoint_url: str | None = None
    region: str | None = None
    #: Both or neither; neither: the standard AWS chain (``AWS_ACCESS_KEY_ID`` /
    #: ``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, instance and task roles).
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None
    #: Address the bucket in the URL's path (``endpoint/bucket/key``) rather than its host
    #: name: MinIO and most self-hosted services need it.
    path_style: bool = False
