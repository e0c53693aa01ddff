"""The :class:`~memmachine.telemetry.Metrics` port on the official Prometheus client.

Every family lives in the registry this object makes (never the client's global one), so two
apps in one process keep separate numbers. Families (all prefixed ``memmachine_``):

==========================================  =========  ======================================
family                                      type       labels
==========================================  =========  ======================================
``http_requests_total``                     counter    method, route (template), status
``http_request_duration_seconds``           histogram  method, route, status
``memory_operation_duration_seconds``       histogram  operation (a method of the memory
                                                       layer), outcome (ok / error code)
``search_duration_seconds``                 histogram  operation (search, search_episodes,
                                                       search_facts, memory_prompt)
``search_stage_duration_seconds``           histogram  stage, outcome
``store_operation_duration_seconds``        histogram  store, backend, operation
``store_errors_total``                      counter    store, backend, operation, error
``model_call_duration_seconds``             histogram  model (embedder / reranker / llm),
                                                       backend, operation
``model_errors_total``                      counter    model, backend, operation, error
``ingested_items_total``                    counter    kind (episodes, facts,
                                                       working_messages)
``embedded_texts_total``                    counter    (none)
``jobs_finished_total``                     counter    kind, outcome (done / retry / dead)
``job_duration_seconds``                    histogram  kind, outcome
``job_queue_jobs``                          gauge      status (queued / running / dead)
``search_index_users``, ``_bytes``,         gauge      (none)
``_budget_bytes``
``search_index_searches_total``             counter    answered_by (index / store)
==========================================  =========  ======================================

plus the client's ``process_*`` and ``python_*`` families of this process. Labels are names
from code, never ids (see :mod:`memmachine.telemetry`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from memmachine.ports import JobQueueStats
from memmachine.telemetry import SEARCH_OPERATIONS, Component, SearchIndexStats

__all__ = ["PrometheusMetrics"]

log = logging.getLogger(__name__)

_P = "memmachine"
#: Request and search latencies: 1 ms to 10 s.
_FAST = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Jobs and model calls: 10 ms to 10 minutes.
_SLOW = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: A scrape waits at most this long for the job queue's counts.
_QUEUE_READ_SECONDS = 2.0


class PrometheusMetrics:
    """:class:`~memmachine.telemetry.Metrics` into a registry of its own
    (``self.registry``); :meth:`render` is the ``/metrics`` body."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        self._requests = Counter(
            f"{_P}_http_requests_total",
            "HTTP requests served, by route template and status.",
            ["method", "route", "status"],
            registry=registry,
        )
        self._request_seconds = Histogram(
            f"{_P}_http_request_duration_seconds",
            "Time to serve an HTTP request, by route template and status.",
            ["method", "route", "status"],
            buckets=_FAST,
            registry=registry,
        )
        self._operation_seconds = Histogram(
            f"{_P}_memory_operation_duration_seconds",
            "Time of one operation of the memory layer (REST, MCP and CLI alike).",
            ["operation", "outcome"],
            buckets=_FAST,
            registry=registry,
        )
        self._search_seconds = Histogram(
            f"{_P}_search_duration_seconds",
            "End-to-end time of a search, query embedding included.",
            ["operation"],
            buckets=_FAST,
            registry=registry,
        )
        self._stage_seconds = Histogram(
            f"{_P}_search_stage_duration_seconds",
            "Time of one stage of a search's retrieval pipeline.",
            ["stage", "outcome"],
            buckets=_FAST,
            registry=registry,
        )
        self._store_calls = self._calls(
            "store", "store_operation_duration_seconds", "store_errors_total", _FAST
        )
        self._model_calls = self._calls(
            "model", "model_call_duration_seconds", "model_errors_total", _SLOW
        )
        self._ingested = Counter(
            f"{_P}_ingested_items_total",
            "Items stored: episodes, profile facts, working-memory messages.",
            ["kind"],
            registry=registry,
        )
        self._embedded = Counter(
            f"{_P}_embedded_texts_total",
            "Texts run through the embedding model.",
            registry=registry,
        )
        self._jobs = Counter(
            f"{_P}_jobs_finished_total",
            "Job attempts that ended: done, retry (failed, queued again), dead (failed "
            "for the last time).",
            ["kind", "outcome"],
            registry=registry,
        )
        self._job_seconds = Histogram(
            f"{_P}_job_duration_seconds",
            "Time of one job attempt.",
            ["kind", "outcome"],
            buckets=_SLOW,
            registry=registry,
        )
        self._gauges = _Gauges()
        registry.register(self._gauges)

    def _calls(
        self, what: str, timings: str, errors: str, buckets: tuple[float, ...]
    ) -> tuple[Histogram, Counter]:
        """The duration and error families of calls to a ``what`` (store or model)."""
        labels = [what, "backend", "operation"]
        return (
            Histogram(
                f"{_P}_{timings}",
                f"Time of one call to a {what}.",
                labels,
                buckets=buckets,
                registry=self.registry,
            ),
            Counter(
                f"{_P}_{errors}",
                f"Calls to a {what} that raised, by error code.",
                [*labels, "error"],
                registry=self.registry,
            ),
        )

    # ------------------------------------------------------------------ recording

    def observe_call(
        self,
        component: Component,
        target: str,
        backend: str,
        operation: str,
        seconds: float,
        error: str | None,
    ) -> None:
        if component == "memory":
            self._operation_seconds.labels(operation, error or "ok").observe(seconds)
            if operation in SEARCH_OPERATIONS and error is None:
                self._search_seconds.labels(operation).observe(seconds)
            return
        timings, errors = self._store_calls if component == "store" else self._model_calls
        timings.labels(target, backend, operation).observe(seconds)
        if error is not None:
            errors.labels(target, backend, operation, error).inc()

    def count_items(self, kind: str, count: int) -> None:
        if kind == "embedded_texts":
            self._embedded.inc(count)
        else:
            self._ingested.labels(kind).inc(count)

    def observe_job(self, kind: str, outcome: str, seconds: float) -> None:
        self._jobs.labels(kind, outcome).inc()
        self._job_seconds.labels(kind, outcome).observe(seconds)

    def observe_stage(self, stage: str, seconds: float, error: str | None) -> None:
        self._stage_seconds.labels(stage, error or "ok").observe(seconds)

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        code = str(status)
        self._requests.labels(method, route, code).inc()
        self._request_seconds.labels(method, route, code).observe(seconds)

    # ------------------------------------------------------------------ read at scrape time

    def watch_index(self, read: Callable[[], SearchIndexStats]) -> None:
        self._gauges.index = read

    def watch_queue(self, read: Callable[[], Awaitable[JobQueueStats]]) -> None:
        self._gauges.queue = read

    async def render(self) -> tuple[bytes, str]:
        """Read the job queue's counts (at most ``_QUEUE_READ_SECONDS``; on failure the
        queue family is left out of this scrape), then the exposition text."""
        await self._gauges.refresh()
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _Gauges:
    """A collector of what is read from elsewhere when scraped: the search indexes
    (synchronously, a few sums) and the job queue (read by :meth:`refresh` first)."""

    def __init__(self) -> None:
        self.index: Callable[[], SearchIndexStats] | None = None
        self.queue: Callable[[], Awaitable[JobQueueStats]] | None = None
        self._queue_stats: JobQueueStats | None = None

    async def refresh(self) -> None:
        self._queue_stats = None
        if self.queue is None:
            return
        try:
            async with asyncio.timeout(_QUEUE_READ_SECONDS):
                self._queue_stats = await self.queue()
        except Exception as exc:  # a scrape never fails for the queue's sake
            log.warning("metrics: the job queue's counts could not be read: %s", exc)

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        stats = self._queue_stats
        if stats is not None:
            jobs = GaugeMetricFamily(
                f"{_P}_job_queue_jobs",
                "Jobs in the queue by status, over every user (done jobs not counted).",
                labels=["status"],
            )
            for status in ("queued", "running", "dead"):
                jobs.add_metric([status], getattr(stats, status))
            yield jobs
        if self.index is not None:
            index = self.index()
            yield GaugeMetricFamily(
                f"{_P}_search_index_users",
                "Users whose episodes this process searches from memory.",
                value=index.users,
            )
            yield GaugeMetricFamily(
                f"{_P}_search_index_bytes",
                "Memory the in-process search indexes hold.",
                value=index.bytes,
            )
            yield GaugeMetricFamily(
                f"{_P}_search_index_budget_bytes",
                "Memory the in-process search indexes may hold.",
                value=index.budget_bytes,
            )
            searches = CounterMetricFamily(
                f"{_P}_search_index_searches",
                "Episode searches by what answered them: the in-process index, or the store "
                "(index not ready, over the budget, or the user left to the store).",
                labels=["answered_by"],
            )
            searches.add_metric(["index"], index.searches_in_index)
            searches.add_metric(["store"], index.searches_in_store)
            yield searches
