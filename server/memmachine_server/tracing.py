"""Route spans for the REST app: the standard FastAPI instrumentation on the app's own
tracer provider. Imported only when tracing is on (it loads OpenTelemetry)."""

from __future__ import annotations

from fastapi import FastAPI
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

from memmachine.errors import ConfigurationError
from memmachine.telemetry import Tracer

__all__ = ["instrument_app"]

#: Probes and scrapes are not traced.
_EXCLUDED = "/health,/metrics"


def instrument_app(app: FastAPI, tracer: Tracer) -> None:
    """Give every request to ``app`` a server span (named ``METHOD /route/template``) from
    ``tracer``'s provider, under which the memory layer's spans nest."""
    provider = getattr(tracer, "provider", None)
    if provider is None:
        raise ConfigurationError("tracing needs an OpenTelemetry tracer")
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider, excluded_urls=_EXCLUDED)
