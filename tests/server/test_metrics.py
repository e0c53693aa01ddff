"""``/metrics`` after real traffic on a real app (embedded stores, the local model, the
in-process worker and a loopback LLM): every family the README lists is there with the
numbers the traffic implies, no tenant, user or session id is ever a label value, each app
has its own registry, and only the metrics key or the admin key may scrape a keyed server."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from memmachine.config import (
    CompactionSettings,
    EmbeddingSettings,
    ExtractionSettings,
    JobSettings,
    LlmSettings,
)
from tests.fakes.llm_fixtures import llm_server  # noqa: F401  (the fixture)
from tests.fakes.llm_server import ScriptedChatServer
from tests.server.conftest import AppFactory

ADMIN = "metrics-admin-key-0123456789"
SCRAPER = "metrics-scrape-key-0123456789"
GOOD = '{"text": "Ana talked about her dog.", "covered_ids": []}'


def scrape(app: TestClient, **headers: str) -> dict[str, list[Sample]]:
    """``{family name: samples}`` of one scrape (counters keep their ``_total`` names)."""
    response = app.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    families: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(response.text):
        families.setdefault(family.name, []).extend(family.samples)
    return families


def value(samples: Iterable[Sample], name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(
        sample.value
        for sample in samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def wait_for_job(app: TestClient, user: str, job_id: str, status: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job = app.get(f"/v1/jobs/{job_id}", params={"user_id": user}).json()
        if job["status"] == status:
            return
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} never became {status}")


def compact(app: TestClient, user: str, session: str) -> str:
    messages = [{"role": "user", "content": f"note {n} about the dog"} for n in range(6)]
    written = app.post(
        f"/v1/sessions/{session}/working/messages", json={"user_id": user, "messages": messages}
    )
    assert written.status_code == 200, written.text
    queued = app.post(f"/v1/sessions/{session}/compact", params={"user_id": user})
    assert queued.status_code == 200, queued.text
    job_id: str = queued.json()["job"]["id"]
    return job_id


def test_metrics_after_real_traffic(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
    model_dir: Path,
) -> None:
    app = app_factory(
        embedding=EmbeddingSettings(provider="local", model=str(model_dir)),
        llm=LlmSettings(base_url=llm_server.base_url, model="x", max_retries=0),
        jobs=JobSettings(
            max_attempts=2,
            backoff_base_seconds=0.0,
            backoff_max_seconds=0.0,
            poll_interval_seconds=0.02,
        ),
        compaction=CompactionSettings(keep_last_n=2, trigger_messages=0),
        extraction=ExtractionSettings(enabled=False),  # only the compactions below are jobs
    )
    messages = [
        {"role": "user", "producer": "Ana", "content": "I adopted a beagle called Toast"},
        {"role": "assistant", "content": "Toast is a lovely name for a beagle"},
        {"role": "user", "producer": "Ana", "content": "She loves the beach at Sintra"},
    ]
    added = app.post(
        "/v1/memories", json={"user_id": "ana", "session_id": "s1", "messages": messages}
    )
    assert added.status_code == 201, added.text
    for query in ("what dog does she have?", "where does the dog like to go?"):
        found = app.post("/v1/memories/search", json={"user_id": "ana", "query": query})
        assert found.status_code == 200, found.text
    assert app.get("/v1/sessions/s1/working", params={"user_id": "ana"}).status_code == 200
    assert app.get("/v1/no-such-route").status_code == 404
    assert app.post("/v1/memories/search", json={"query": "no user"}).status_code == 422

    llm_server.default = "not json at all"  # two attempts: a retry, then a dead letter
    dead = compact(app, "ana", "dying")
    wait_for_job(app, "ana", dead, "dead")
    llm_server.default = GOOD
    done = compact(app, "ana", "fine")
    wait_for_job(app, "ana", done, "done")

    metrics = scrape(app)
    http = metrics["memmachine_http_requests"]
    assert value(http, "memmachine_http_requests_total", route="/v1/memories", status="201") == 1
    search_route = {"method": "POST", "route": "/v1/memories/search"}
    assert value(http, "memmachine_http_requests_total", status="200", **search_route) == 2
    assert value(http, "memmachine_http_requests_total", status="422", **search_route) == 1
    assert (
        value(
            http,
            "memmachine_http_requests_total",
            route="/v1/sessions/{session_id}/working",
            status="200",
        )
        == 1
    )
    assert value(http, "memmachine_http_requests_total", route="unmatched", status="404") == 1
    latency = metrics["memmachine_http_request_duration_seconds"]
    assert value(latency, "memmachine_http_request_duration_seconds_count", **search_route) == 3
    assert (
        value(latency, "memmachine_http_request_duration_seconds_bucket", le="+Inf", **search_route)
        == 3
    )

    searches = metrics["memmachine_search_duration_seconds"]
    assert value(searches, "memmachine_search_duration_seconds_count", operation="search") == 2
    # every stage that ran in the two searches, by name; those off by default are absent
    stages = metrics["memmachine_search_stage_duration_seconds"]
    stage_count = "memmachine_search_stage_duration_seconds_count"
    for stage in ("candidates", "fusion", "neighbourhood", "ranking"):
        assert value(stages, stage_count, stage=stage, outcome="ok") == 2, stage
    ran = {sample.labels["stage"] for sample in stages}
    assert ran.isdisjoint({"recency", "importance", "rerank"})
    operations = metrics["memmachine_memory_operation_duration_seconds"]
    assert (
        value(
            operations,
            "memmachine_memory_operation_duration_seconds_count",
            operation="add_messages",
            outcome="ok",
        )
        == 1
    )

    stores = metrics["memmachine_store_operation_duration_seconds"]
    count = "memmachine_store_operation_duration_seconds_count"
    assert value(stores, count, store="episodic", backend="falkordb", operation="add_episodes") == 1
    assert value(stores, count, store="episodic", operation="index_state") >= 2
    assert value(stores, count, store="profile", backend="sqlite", operation="search_facts") >= 2
    assert value(stores, count, store="working", backend="redis", operation="append") >= 1
    assert value(stores, count, store="jobs", operation="enqueue") >= 2
    assert "memmachine_store_errors" in metrics

    models = metrics["memmachine_model_call_duration_seconds"]
    calls = "memmachine_model_call_duration_seconds_count"
    # the two queries, embedded as queries (the model's query form)
    assert value(models, calls, model="embedder", operation="embed_queries") >= 2
    assert value(models, calls, model="llm", operation="complete_structured") == 3
    errors = metrics["memmachine_model_errors"]
    assert (
        value(errors, "memmachine_model_errors_total", model="llm", error="model_output_error") == 2
    )

    ingested = metrics["memmachine_ingested_items"]
    assert value(ingested, "memmachine_ingested_items_total", kind="episodes") == 3
    assert value(ingested, "memmachine_ingested_items_total", kind="working_messages") >= 15
    # texts run through the model: the add's three messages share one run (a stretch), and
    # each of the two queries is one
    assert value(metrics["memmachine_embedded_texts"], "memmachine_embedded_texts_total") >= 3

    jobs = metrics["memmachine_jobs_finished"]
    for outcome in ("retry", "dead", "done"):
        assert value(jobs, "memmachine_jobs_finished_total", kind="compact", outcome=outcome) == 1
    assert (
        value(
            metrics["memmachine_job_duration_seconds"],
            "memmachine_job_duration_seconds_count",
            kind="compact",
        )
        == 3
    )
    queue = metrics["memmachine_job_queue_jobs"]
    assert value(queue, "memmachine_job_queue_jobs", status="dead") == 1
    # the idle compaction each of the three sessions has scheduled (due in 30 minutes)
    assert value(queue, "memmachine_job_queue_jobs", status="queued") == 3

    assert value(metrics["memmachine_search_index_users"], "memmachine_search_index_users") == 1
    assert value(metrics["memmachine_search_index_bytes"], "memmachine_search_index_bytes") > 0
    assert (
        value(
            metrics["memmachine_search_index_budget_bytes"], "memmachine_search_index_budget_bytes"
        )
        == 1024 << 20
    )
    index = metrics["memmachine_search_index_searches"]
    assert value(index, "memmachine_search_index_searches_total", answered_by="index") >= 2
    assert "process_resident_memory_bytes" in metrics


def _traffic(app: TestClient, key: str, user: str, session: str) -> None:
    """Requests that carry the ids in the body, the query, headers and paths."""
    auth = {"Authorization": f"Bearer {key}"}
    body = {"user_id": user, "session_id": session, "messages": [{"content": "hello there"}]}
    added = app.post("/v1/memories", json=body, headers=auth)
    assert added.status_code == 201, added.text
    episode = added.json()["episode_ids"][0]
    assert (
        app.get(f"/v1/memories/{episode}", params={"user_id": user}, headers=auth).status_code
        == 200
    )
    found = app.post(
        "/v1/memories/search", json={"query": "hello"}, headers={**auth, "X-User-ID": user}
    )
    assert found.status_code == 200
    assert (
        app.get(
            f"/v1/sessions/{session}/working", params={"user_id": user}, headers=auth
        ).status_code
        == 200
    )
    assert (
        app.delete(f"/v1/sessions/{session}", params={"user_id": user}, headers=auth).status_code
        == 200
    )
    assert app.delete(f"/v1/users/{user}", headers=auth).status_code == 200
    assert app.get("/v1/memories/nope", params={"user_id": user}, headers=auth).status_code == 404


def test_no_tenant_user_session_or_episode_id_becomes_a_label(
    app_factory: AppFactory, unique: str
) -> None:
    tenant, user, session = f"tenant{unique}", f"user{unique}", f"session{unique}"
    key = f"key-{unique}-0123456789"
    app = app_factory(
        embedding=EmbeddingSettings(provider="none"), api_keys=f"{key}={tenant}", admin_key=ADMIN
    )
    _traffic(app, key, user, session)
    text = app.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
    assert 'route="/v1/users/{user_id}"' in text  # the traffic is there, by template
    assert 'route="/v1/memories/{episode_id}"' in text
    for secret in (unique, tenant, user, session, key):
        assert secret not in text


def test_each_app_has_its_own_registry(app_factory: AppFactory) -> None:
    first = app_factory(embedding=EmbeddingSettings(provider="none"))
    second = app_factory(embedding=EmbeddingSettings(provider="none"))
    for _ in range(3):
        assert first.get("/health").status_code == 200
    assert second.get("/health").status_code == 200
    health = {"route": "/health", "status": "200"}
    assert (
        value(scrape(first)["memmachine_http_requests"], "memmachine_http_requests_total", **health)
        == 3
    )
    assert (
        value(
            scrape(second)["memmachine_http_requests"], "memmachine_http_requests_total", **health
        )
        == 1
    )


@pytest.mark.parametrize(
    ("token", "status"),
    [
        (None, 401),
        ("not-a-key-anyone-issued", 401),
        ("tenant-key-0123456789", 403),
        (SCRAPER, 200),
        (ADMIN, 200),
    ],
)
def test_a_keyed_server_shows_metrics_to_the_metrics_and_admin_keys_only(
    app_factory: AppFactory, token: str | None, status: int
) -> None:
    app = app_factory(
        embedding=EmbeddingSettings(provider="none"),
        api_keys="tenant-key-0123456789=acme",
        admin_key=ADMIN,
        metrics={"key": SCRAPER},
    )
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    response = app.get("/metrics", headers=headers)
    assert response.status_code == status, response.text
    if status != 200:
        assert response.json()["error"]["code"] in ("unauthenticated", "permission_denied")
        assert "memmachine_" not in response.text


def test_an_open_server_serves_metrics_openly_and_they_can_be_switched_off(
    app_factory: AppFactory,
) -> None:
    open_app = app_factory(embedding=EmbeddingSettings(provider="none"))
    assert open_app.get("/health").status_code == 200
    assert "memmachine_http_requests" in scrape(open_app)  # no key needed
    off = app_factory(embedding=EmbeddingSettings(provider="none"), metrics={"enabled": False})
    assert off.get("/metrics").status_code == 404
    assert off.get("/health").status_code == 200
