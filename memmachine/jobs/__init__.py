"""Background jobs: the worker that runs them and the handlers by kind (the queue is a port)."""

from __future__ import annotations

from memmachine.config import JobSettings
from memmachine.jobs.worker import Handler, Worker, describe_failure

__all__ = ["Handler", "JobSettings", "Worker", "describe_failure"]
