"""What the service tells about itself: metrics, trace spans and the request id.

Two ports and one object that drives them:

* :class:`Metrics` records counts and durations (the server's adapter is
  :class:`~memmachine.adapters.prometheus.prometheus_metrics.PrometheusMetrics`, served at
  ``/metrics``).
* :class:`Tracer` opens spans (the optional adapter is
  :class:`~memmachine.adapters.opentelemetry.opentelemetry_tracer.OpenTelemetryTracer`).
* :class:`Telemetry` is what the rest of the code calls: ``with telemetry.call(...)`` around a
  store or model call times it into the metrics and opens a span, either part being optional.
  The composition root makes one per process (one per app) and wraps every store, model and
  the manager's operations with it; nothing here is global.

Label values are names from code only (a store's name and kind, a method name, a job kind,
a stage name, a route template, a status): never a tenant, user, session or any id, so
neither the metrics nor their cardinality depend on who calls.

The request id lives in a context variable: the server binds the id of each request
(:func:`bind_request_id`), the job queue stores it with the jobs a request enqueues, and the
worker binds it again while it runs such a job, so every log line of the request and of its
jobs can carry it (see ``memmachine_server.logs``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from memmachine.errors import MemMachineError
from memmachine.ports import JobQueueStats

__all__ = [
    "REQUEST_ID_PATTERN",
    "SEARCH_OPERATIONS",
    "AttributeValue",
    "Component",
    "Metrics",
    "SearchIndexStats",
    "Telemetry",
    "Tracer",
    "bind_request_id",
    "current_request_id",
    "error_label",
    "new_request_id",
    "valid_request_id",
]

#: What a call is to: a store (episodic, profile, working, jobs), a model (embedder,
#: reranker, llm) or an operation of the memory layer (search, add_messages...).
Component = Literal["store", "model", "memory"]
AttributeValue = str | int | float | bool

#: An incoming ``X-Request-ID`` is used when it matches this (else a new id is made): short,
#: printable, no spaces or quotes, so it is safe in a header, a log line and a Redis hash.
REQUEST_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+=\-]{0,127}$"
_REQUEST_ID = re.compile(REQUEST_ID_PATTERN)

#: The id of the request (or of the request that enqueued the job) being served. A context
#: variable is per task by design, so this is not shared state between requests.
_request_id: ContextVar[str | None] = ContextVar("memmachine_request_id", default=None)

#: Memory-layer operations that are searches: their durations also go to the search family.
SEARCH_OPERATIONS = frozenset({"search", "search_episodes", "search_facts", "memory_prompt"})
#: Methods of an instrumented object that are not operations.
_NOT_OPERATIONS = frozenset({"start", "close", "health"})


def new_request_id() -> str:
    """A fresh request id: 32 hex digits."""
    return uuid.uuid4().hex


def valid_request_id(value: str | None) -> bool:
    """Whether ``value`` may be used as a request id as it is."""
    return value is not None and _REQUEST_ID.fullmatch(value) is not None


def current_request_id() -> str | None:
    """The request id bound in this context, or ``None``."""
    return _request_id.get()


@contextmanager
def bind_request_id(value: str | None) -> Iterator[None]:
    """Make ``value`` the current request id inside the block."""
    token = _request_id.set(value)
    try:
        yield
    finally:
        _request_id.reset(token)


def error_label(exc: BaseException) -> str:
    """A bounded name for what went wrong: the error tree's code (``store_unavailable``,
    ``conflict``...), ``cancelled``, or ``internal_error`` for anything else."""
    if isinstance(exc, MemMachineError):
        return exc.code
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    return "internal_error"


@dataclass(frozen=True)
class SearchIndexStats:
    """The in-process search indexes of one process: users and bytes held, the budget, and
    how many searches each path answered since start (index = in memory, store = the
    wrapped store, because the user's index was not ready or is left to the store)."""

    users: int
    bytes: int
    budget_bytes: int
    searches_in_index: int
    searches_in_store: int


@runtime_checkable
class Metrics(Protocol):
    """Counts and durations of what the process does.

    Contract: no method raises for its own reasons (a metrics problem never fails a request);
    label values are the names passed in, which callers keep bounded (no ids).
    ``render()`` returns the exposition of everything recorded so far in this registry only
    (one per app), and its content type; sources given to ``watch_*`` are read then.
    """

    def observe_call(
        self,
        component: Component,
        target: str,
        backend: str,
        operation: str,
        seconds: float,
        error: str | None,
    ) -> None: ...
    def count_items(self, kind: str, count: int) -> None: ...
    def observe_job(self, kind: str, outcome: str, seconds: float) -> None: ...
    def observe_stage(self, stage: str, seconds: float, error: str | None) -> None: ...
    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None: ...
    def watch_index(self, read: Callable[[], SearchIndexStats]) -> None: ...
    def watch_queue(self, read: Callable[[], Awaitable[JobQueueStats]]) -> None: ...
    async def render(self) -> tuple[bytes, str]: ...


@runtime_checkable
class Tracer(Protocol):
    """Spans of one process.

    Contract: ``span(name, attributes)`` returns a context manager that makes a new span the
    current one inside the block (a child of the span current on entry), records an
    exception that leaves the block (status error) and ends the span on exit. ``close()``
    flushes and stops the exporter; it may be called twice.
    """

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[None]: ...
    def close(self) -> None: ...


class Telemetry:
    """Metrics and spans for calls, stages and jobs; either part may be absent.

    Also a :class:`~memmachine.stage_observer.StageObserver` (``stage(name)``).
    """

    def __init__(self, metrics: Metrics | None = None, tracer: Tracer | None = None) -> None:
        self.metrics = metrics
        self.tracer = tracer

    def close(self) -> None:
        """Flush and stop the tracer's exporter. Safe to call twice."""
        if self.tracer is not None:
            self.tracer.close()

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[None]:
        """A span when tracing is on, else nothing."""
        if self.tracer is None:
            return nullcontext()
        return self.tracer.span(name, attributes)

    @contextmanager
    def call(
        self,
        component: Component,
        target: str,
        operation: str,
        *,
        backend: str = "",
        span: bool = True,
    ) -> Iterator[None]:
        """Time the block as ``operation`` of ``target`` (a store's or model's name) and,
        with ``span``, run it in a span ``<target>.<operation>``. An exception leaving the
        block is counted by its :func:`error_label` and passes through."""
        attributes: dict[str, AttributeValue] = {
            "memmachine.component": component,
            "memmachine.operation": operation,
        }
        if backend:
            attributes["memmachine.backend"] = backend
        request_id = current_request_id()
        if request_id is not None:
            attributes["memmachine.request_id"] = request_id
        metrics = self.metrics

        def record(seconds: float, error: str | None) -> None:
            if metrics is not None:
                metrics.observe_call(component, target, backend, operation, seconds, error)

        opened = self.span(f"{target}.{operation}", attributes) if span else nullcontext()
        with opened, _measured(record):
            yield

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """One stage of a search (see :mod:`memmachine.stage_observer`)."""
        metrics = self.metrics

        def record(seconds: float, error: str | None) -> None:
            if metrics is not None:
                metrics.observe_stage(name, seconds, error)

        with self.span(f"stage.{name}", {"memmachine.stage": name}), _measured(record):
            yield

    def count(self, kind: str, count: int) -> None:
        """``count`` more items of ``kind`` (episodes, facts, working_messages,
        embedded_texts) went through."""
        if self.metrics is not None and count > 0:
            self.metrics.count_items(kind, count)

    def job_finished(self, kind: str, outcome: str, seconds: float) -> None:
        """A job attempt of ``kind`` ended: ``done``, ``retry`` (failed, queued again) or
        ``dead`` (failed for the last time)."""
        if self.metrics is not None:
            self.metrics.observe_job(kind, outcome, seconds)

    def instrument_operations(self, target: object, component: str = "memory") -> None:
        """Time and trace every public coroutine method of ``target`` (its class's, and the
        coroutine methods it holds as attributes, as the manager holds its services'; but
        ``start``, ``close`` and ``health``) as an operation of ``component``: each call
        runs in a span ``<component>.<method>`` (the parent of the store and model calls it
        makes) and is timed into the memory-operation family; searches also into the
        search family. Replaces the methods on this instance only."""
        names = {name for name, _ in inspect.getmembers(type(target), inspect.iscoroutinefunction)}
        names |= {
            name for name, value in vars(target).items() if inspect.iscoroutinefunction(value)
        }
        for name in sorted(names):
            if name.startswith("_") or name in _NOT_OPERATIONS:
                continue
            setattr(target, name, self._operation(getattr(target, name), component, name))

    def _operation(
        self, method: Callable[..., Awaitable[Any]], component: str, name: str
    ) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(method)
        async def operation(*args: Any, **kwargs: Any) -> Any:
            with self.call("memory", component, name):
                return await method(*args, **kwargs)

        return operation


@contextmanager
def _measured(record: Callable[[float, str | None], None]) -> Iterator[None]:
    """Time the block and pass ``record`` its seconds and the :func:`error_label` of an
    exception leaving it (``None`` when none did); the exception passes through."""
    error: str | None = None
    started = time.perf_counter()
    try:
        yield
    except BaseException as exc:
        error = error_label(exc)
        raise
    finally:
        record(time.perf_counter() - started, error)
