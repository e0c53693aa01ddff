"""Observability and shared limits from settings: the process's telemetry (Prometheus
metrics, OpenTelemetry traces), every store and model behind its observing wrapper, and the
API keys' rate limiter."""

from __future__ import annotations

from dataclasses import dataclass

from memmachine.bootstrap.stores import (
    check_schemes,
    resolve_credentials,
    secret,
    store_credentials,
)
from memmachine.config import Settings
from memmachine.errors import ConfigurationError
from memmachine.ports import (
    Embedder,
    EpisodeStore,
    JobQueue,
    LanguageModel,
    ProfileStore,
    RateLimiter,
    Reranker,
    WorkingMemoryStore,
)
from memmachine.telemetry import Telemetry

__all__ = ["StoreParts", "build_rate_limiter", "build_telemetry", "observed"]


def build_telemetry(settings: Settings, *, service_name: str | None = None) -> Telemetry:
    """The telemetry of one app or worker process: Prometheus metrics in a registry of its
    own (unless ``MEMMACHINE_METRICS_ENABLED`` is off) and, with
    ``MEMMACHINE_TRACING_ENABLED``, an OpenTelemetry tracer (the ``otel`` extra; without
    it a ``ConfigurationError`` says so). OpenTelemetry is not imported otherwise. The
    caller closes it (``telemetry.close()``) after the manager."""
    from memmachine.adapters.prometheus.prometheus_metrics import PrometheusMetrics

    metrics = PrometheusMetrics() if settings.metrics.enabled else None
    if not settings.tracing.enabled:
        return Telemetry(metrics)
    try:
        from memmachine.adapters.opentelemetry.opentelemetry_tracer import OpenTelemetryTracer
    except ImportError as exc:
        raise ConfigurationError(
            "MEMMACHINE_TRACING_ENABLED needs OpenTelemetry: install the server's otel extra "
            f"(pip install 'memmachine-service[otel]'); {type(exc).__name__}: {exc}"
        ) from None
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("memmachine")
    except PackageNotFoundError:  # pragma: no cover - a bare checkout
        release = ""
    tracer = OpenTelemetryTracer(
        settings.tracing.exporter,
        service_name=service_name or settings.tracing.service_name,
        service_version=release,
    )
    return Telemetry(metrics, tracer)


@dataclass
class StoreParts:
    """What the composition root builds before it makes the manager."""

    episodes: EpisodeStore
    profile: ProfileStore
    working: WorkingMemoryStore
    jobs: JobQueue
    embedder: Embedder | None
    reranker: Reranker | None
    language_model: tuple[LanguageModel | None, str]


def observed(telemetry: Telemetry | None, parts: StoreParts) -> StoreParts:
    """Every store and model of ``parts`` behind its ``Observed*`` wrapper (durations,
    errors, spans, items counted), and the queue's counts watched by the metrics."""
    if telemetry is None:
        return parts
    from memmachine.adapters.observed.observed_embedder import ObservedEmbedder
    from memmachine.adapters.observed.observed_episode_store import ObservedEpisodeStore
    from memmachine.adapters.observed.observed_job_queue import ObservedJobQueue
    from memmachine.adapters.observed.observed_language_model import ObservedLanguageModel
    from memmachine.adapters.observed.observed_profile_store import ObservedProfileStore
    from memmachine.adapters.observed.observed_reranker import ObservedReranker
    from memmachine.adapters.observed.observed_working_memory_store import (
        ObservedWorkingMemoryStore,
    )

    jobs = ObservedJobQueue(parts.jobs, telemetry)
    if telemetry.metrics is not None:
        telemetry.metrics.watch_queue(jobs.stats)
    model, off_reason = parts.language_model
    return StoreParts(
        episodes=ObservedEpisodeStore(parts.episodes, telemetry),
        profile=ObservedProfileStore(parts.profile, telemetry),
        working=ObservedWorkingMemoryStore(parts.working, telemetry),
        jobs=jobs,
        embedder=ObservedEmbedder(parts.embedder, telemetry) if parts.embedder else None,
        reranker=ObservedReranker(parts.reranker, telemetry) if parts.reranker else None,
        language_model=(
            ObservedLanguageModel(model, telemetry) if model else None,
            off_reason,
        ),
    )


def build_rate_limiter(settings: Settings) -> RateLimiter:
    """The API keys' rate limiter (not yet started): on the working store's Redis when
    ``MEMMACHINE_WORKING_STORE_URL`` is set, so every server process on it shares one
    bucket per key (keys under ``MEMMACHINE_WORKING_KEY_PREFIX``); else in this process,
    which is all the embedded mode (one process per data dir) needs."""
    url = secret(settings.working_store_url)
    if url is None:
        from memmachine.adapters.inprocess.in_process_rate_limiter import InProcessRateLimiter

        return InProcessRateLimiter()
    from memmachine.adapters.redis.redis_rate_limiter import RedisRateLimiter

    check_schemes(None, None, url)
    password: str | None = None
    found = store_credentials("WORKING", url, None, settings.working_store_password)
    if found.password is not None and resolve_credentials(url).password is None:
        password = found.password.get_secret_value()
    return RedisRateLimiter(url, key_prefix=settings.working_key_prefix, password=password)
