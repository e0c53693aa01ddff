"""Settings of the background job queue and worker (``MEMMACHINE_JOBS_*``)."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["JobSettings"]


class JobSettings(BaseSettings):
    """Where jobs are queued and how they are retried (``MEMMACHINE_JOBS_*``)."""

    model_config = SettingsConfigDict(env_prefix="MEMMACHINE_JOBS_", extra="ignore")

    #: Unset = the working store's Redis (the embedded server by default); ``redis://``,
    #: ``rediss://`` or ``unix:///path.sock`` = that server.
    url: SecretStr | None = None
    #: Overrides a password in ``url``.
    password: SecretStr | None = None
    #: Prefix of every key of the queue, so deployments can share a server.
    key_prefix: str = Field(default="mm", pattern=r"^[\w.@+\-=#~|]{1,128}$")
    #: A failed job waits a random delay in [0, min(max, base * 2**(attempts-1))] seconds.
    backoff_base_seconds: float = Field(default=1.0, ge=0)
    backoff_max_seconds: float = Field(default=300.0, ge=0)
    #: Tries before a job is parked in the dead-letter list.
    max_attempts: int = Field(default=5, ge=1, le=100)
    #: How long a worker holds a job; a job still running then is handed to another worker.
    #: Handlers must finish within it (the lease is not renewed).
    lease_seconds: float = Field(default=300.0, gt=0)
    #: Run a worker inside ``memmachine serve``; off = run ``memmachine worker`` separately.
    in_process_worker: bool = True
    #: Jobs one worker process runs at once.
    concurrency: int = Field(default=1, ge=1, le=64)
    #: Sleep between polls of an empty queue.
    poll_interval_seconds: float = Field(default=0.5, gt=0, le=60)
