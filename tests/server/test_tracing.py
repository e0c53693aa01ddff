"""OpenTelemetry spans (the ``otel`` extra): one search through the REST app, exported in
memory, makes one tree from the route's server span through the memory layer's operations to
each store and model call; a job's spans carry its request id and reach the LLM's HTTP
request; with tracing off OpenTelemetry is never imported."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memmachine.adapters.opentelemetry.opentelemetry_tracer import OpenTelemetryTracer
from memmachine.adapters.prometheus.prometheus_metrics import PrometheusMetrics
from memmachine.bootstrap import build_telemetry
from memmachine.config import (
    CompactionSettings,
    EmbeddingSettings,
    ExtractionSettings,
    JobSettings,
    LlmSettings,
    Settings,
    TracingSettings,
)
from memmachine.telemetry import Telemetry
from memmachine_server.app import create_app
from tests.conftest import REPO_ROOT
from tests.fakes.llm_fixtures import llm_server  # noqa: F401  (the fixture)
from tests.fakes.llm_server import ScriptedChatServer
from tests.server.conftest import LOCAL, make_settings


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced(tmp_path: Path, exporter: InMemorySpanExporter, model_dir: Path) -> Iterator[TestClient]:
    """An app with the local model whose spans go to ``exporter``."""
    telemetry = Telemetry(PrometheusMetrics(), OpenTelemetryTracer(exporter))
    settings = make_settings(
        tmp_path, embedding=EmbeddingSettings(provider="local", model=str(model_dir))
    )
    try:
        with TestClient(create_app(settings, telemetry=telemetry), base_url=LOCAL) as client:
            yield client
    finally:
        telemetry.close()


def tree(spans: list[ReadableSpan], root: ReadableSpan, depth: int = 0) -> list[str]:
    """The names under ``root``, indented by depth, children in start order (the ASGI
    instrumentation's ``http send`` / ``http receive`` spans left out)."""
    lines = ["  " * depth + root.name]
    assert root.context is not None
    children = sorted(
        (
            span
            for span in spans
            if span.parent is not None
            and span.parent.span_id == root.context.span_id
            and not span.name.endswith(("http send", "http receive"))
        ),
        key=lambda span: (span.start_time or 0, span.name),
    )
    for child in children:
        lines += tree(spans, child, depth + 1)
    return lines


def test_one_search_is_one_tree_from_the_route_to_each_store_and_model_call(
    traced: TestClient, exporter: InMemorySpanExporter
) -> None:
    body = {
        "user_id": "ana",
        "session_id": "s1",
        "messages": [{"role": "user", "producer": "Ana", "content": "I adopted a beagle"}],
    }
    assert traced.post("/v1/memories", json=body).status_code == 201
    exporter.clear()

    response = traced.post(
        "/v1/memories/search",
        json={"user_id": "ana", "session_id": "s1", "query": "what dog?"},
        headers={"X-Request-ID": "trace-me-1"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["episodic"], "the search found nothing"
    spans = list(exporter.get_finished_spans())
    assert len({span.context.trace_id for span in spans if span.context}) == 1  # one trace
    (root,) = [span for span in spans if span.parent is None]
    assert root.name == "POST /v1/memories/search"
    assert root.attributes is not None
    assert root.attributes["http.route"] == "/v1/memories/search"

    lines = tree(spans, root)
    assert lines[0] == "POST /v1/memories/search"
    assert lines[1] == "  memory.search"
    under_search = [line.strip() for line in lines[2:]]
    # the query is embedded once (as a query), then episodes, facts and the session are searched
    assert under_search[0] == "embedder.embed_queries"
    assert {"memory.search_episodes", "memory.search_facts", "memory.get_working"} <= set(
        under_search
    )
    # each retrieval stage is a span under memory.search_episodes, its store calls under it
    search_episodes = lines.index("    memory.search_episodes")
    assert lines[search_episodes + 1] == "  " * 3 + "stage.candidates"
    assert lines[search_episodes + 2] == "  " * 4 + "episodic.index_state"
    assert {"  " * 3 + "stage.fusion", "  " * 3 + "stage.ranking"} <= set(lines)
    assert "  " * 3 + "profile.search_facts" in lines  # under memory.search_facts
    assert "  " * 3 + "working.get" in lines  # under memory.get_working
    assert len(lines) == len(spans) - sum(
        span.name.endswith(("http send", "http receive")) for span in spans
    )  # every span is in the tree

    by_name = {span.name: span for span in spans}
    store_call = by_name["profile.search_facts"].attributes
    assert store_call is not None
    assert store_call["memmachine.component"] == "store"
    assert store_call["memmachine.backend"] == "sqlite"
    assert store_call["memmachine.request_id"] == "trace-me-1"
    assert response.headers["x-request-id"] == "trace-me-1"


def test_a_jobs_span_carries_its_request_and_the_llms_http_request(
    tmp_path: Path,
    exporter: InMemorySpanExporter,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    telemetry = Telemetry(PrometheusMetrics(), OpenTelemetryTracer(exporter))
    settings = make_settings(
        tmp_path,
        embedding=EmbeddingSettings(provider="none"),
        llm=LlmSettings(base_url=llm_server.base_url, model="x", max_retries=0),
        jobs=JobSettings(poll_interval_seconds=0.02),
        compaction=CompactionSettings(keep_last_n=2, trigger_messages=0, idle_seconds=0),
        extraction=ExtractionSettings(enabled=False),
    )
    llm_server.default = '{"text": "Ana has a dog.", "covered_ids": []}'
    messages = [{"role": "user", "content": f"note {n} about the dog"} for n in range(5)]
    try:
        with TestClient(create_app(settings, telemetry=telemetry), base_url=LOCAL) as app:
            app.post(
                "/v1/sessions/s1/working/messages", json={"user_id": "ana", "messages": messages}
            )
            queued = app.post(
                "/v1/sessions/s1/compact",
                params={"user_id": "ana"},
                headers={"X-Request-ID": "compact-request-7"},
            )
            job_id = queued.json()["job"]["id"]
            deadline = time.monotonic() + 20
            while (
                app.get(f"/v1/jobs/{job_id}", params={"user_id": "ana"}).json()["status"] != "done"
            ):
                assert time.monotonic() < deadline, "the job never finished"
                time.sleep(0.02)
            job = app.get(f"/v1/jobs/{job_id}", params={"user_id": "ana"}).json()
            assert job["request_id"] == "compact-request-7"
    finally:
        telemetry.close()
    spans = list(exporter.get_finished_spans())
    (job_span,) = [span for span in spans if span.name == "job.compact"]
    assert job_span.parent is None  # a trace of its own, not under the request's
    lines = tree(spans, job_span)
    assert "  llm.complete_structured" in lines
    http = [line for line in lines if line.startswith("    POST")]  # httpx, under the LLM call
    assert http, lines
    llm_call = next(span for span in spans if span.name == "llm.complete_structured")
    assert llm_call.attributes is not None
    assert llm_call.attributes["memmachine.request_id"] == "compact-request-7"


def test_build_telemetry_makes_a_tracer_only_when_tracing_is_on(tmp_path: Path) -> None:
    off = build_telemetry(Settings(data_dir=tmp_path))
    assert off.tracer is None
    assert off.metrics is not None
    on = build_telemetry(Settings(data_dir=tmp_path, tracing=TracingSettings(enabled=True)))
    try:
        assert isinstance(on.tracer, OpenTelemetryTracer)
    finally:
        on.close()
        on.close()  # twice is fine


def test_with_tracing_off_opentelemetry_is_never_imported(tmp_path: Path) -> None:
    """memmachine loads no tracer, instrumentation or exporter (the ``mcp`` and ``redis``
    packages import ``opentelemetry`` themselves when it is installed; without a tracer
    provider their spans are no-ops)."""
    code = (
        "import sys\n"
        "from fastapi.testclient import TestClient\n"
        "from memmachine.config import Settings, EmbeddingSettings\n"
        "from memmachine_server.app import create_app\n"
        f"settings = Settings(data_dir={str(tmp_path)!r},\n"
        "    embedding=EmbeddingSettings(provider='none'))\n"
        'with TestClient(create_app(settings), base_url="http://localhost") as app:\n'
        "    found = app.post('/v1/memories/search', json={'user_id': 'a', 'query': 'x'})\n"
        "    assert found.status_code == 200\n"
        "    assert app.get('/metrics').status_code == 200\n"
        "ours = ('opentelemetry.instrumentation', 'opentelemetry.exporter', "
        "'memmachine.adapters.opentelemetry.opentelemetry_tracer', 'memmachine_server.tracing')\n"
        "print(sorted(m for m in sys.modules if m.startswith(ours)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
