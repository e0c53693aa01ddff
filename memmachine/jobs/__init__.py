"""Background jobs of a manager: the worker (:mod:`memmachine.pipeline.worker`) and which
handler runs each kind of job (:mod:`memmachine.jobs.handlers`)."""

from __future__ import annotations

from memmachine.config import JobSettings
from memmachine.pipeline.worker import Handler, Worker, describe_failure

__all__ = ["Handler", "JobSettings", "Worker", "describe_failure"]
