"""The :class:`~memmachine.telemetry.Tracer` port on OpenTelemetry (the ``otel`` extra).

Imported only when tracing is switched on (``MEMMACHINE_TRACING_ENABLED``), so an install
without the extra never loads OpenTelemetry. The tracer provider is this object's own
(``self.provider``), never the process-wide global one, so two apps in a process trace
separately; the server hands it to the FastAPI instrumentation for the route spans.

Outgoing HTTP calls made with httpx (the OpenAI-compatible embedder) or httpx2 (what the
``openai`` client of the language model runs on) get spans from the standard httpx
instrumentation, which patches those libraries for the whole process: the first tracer to
start in a process instruments them, and removes that when it closes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager

from opentelemetry.instrumentation import httpx as httpx_instrumentation
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

from memmachine.errors import ConfigurationError
from memmachine.telemetry import AttributeValue

__all__ = ["OpenTelemetryTracer"]


class OpenTelemetryTracer:
    """Spans into ``exporter``: ``"otlp"`` (OTLP over HTTP, configured by the standard
    ``OTEL_EXPORTER_OTLP_*`` variables, default ``http://localhost:4318``), ``"console"``
    (JSON on stdout) or a :class:`SpanExporter` (tests pass an in-memory one; its spans are
    exported as each ends). ``service_name`` and ``service_version`` describe the process."""

    def __init__(
        self,
        exporter: str | SpanExporter = "otlp",
        *,
        service_name: str = "memmachine",
        service_version: str = "",
    ) -> None:
        resource = Resource.create(
            {"service.name": service_name, "service.version": service_version}
        )
        self.provider = TracerProvider(resource=resource)
        if isinstance(exporter, SpanExporter):
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        else:
            self.provider.add_span_processor(BatchSpanProcessor(_exporter(exporter)))
        self._tracer = self.provider.get_tracer("memmachine")
        self._instrumented: list[BaseInstrumentor] = []
        for name in ("HTTPXClientInstrumentor", "HTTPX2ClientInstrumentor"):
            kind = getattr(httpx_instrumentation, name, None)
            instrumentor = kind() if kind is not None else None
            if instrumentor is None or instrumentor.is_instrumented_by_opentelemetry:
                continue
            instrumentor.instrument(tracer_provider=self.provider)
            if instrumentor.is_instrumented_by_opentelemetry:  # its library is installed
                self._instrumented.append(instrumentor)
        self._closed = False

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[None]:
        return self._span(name, dict(attributes or {}))

    @contextmanager
    def _span(self, name: str, attributes: dict[str, AttributeValue]) -> Iterator[None]:
        with self._tracer.start_as_current_span(name, attributes=attributes):
            yield

    def close(self) -> None:
        """Remove the httpx instrumentation (when this tracer put it there), then flush
        and shut the exporter down. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for instrumentor in self._instrumented:
            instrumentor.uninstrument()
        self.provider.shutdown()


def _exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    if name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    raise ConfigurationError(f"MEMMACHINE_TRACING_EXPORTER: unknown exporter {name!r}")
