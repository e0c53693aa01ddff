"""/v1/jobs and /v1/sessions/{sid}/compact over a real app with its in-process worker and a
scripted model: a malformed reply is retried, dead-lettered with the raw reply visible, and
done once replayed after the model is fixed; jobs are confined to their user."""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi.testclient import TestClient

from memmachine.config import CompactionSettings, JobSettings, LlmSettings
from tests.fakes.llm_fixtures import llm_server  # noqa: F401  (the fixture)
from tests.fakes.llm_server import ScriptedChatServer
from tests.server.conftest import AppFactory

GOOD = json.dumps({"text": "Bob is moving to Oslo.", "covered_ids": []})


def _app(app_factory: AppFactory, llm: ScriptedChatServer, **jobs: Any) -> TestClient:
    return app_factory(
        llm=LlmSettings(base_url=llm.base_url, model="x", max_retries=0),
        jobs=JobSettings(
            backoff_base_seconds=0.0,
            backoff_max_seconds=0.0,
            poll_interval_seconds=0.02,
            **{"max_attempts": 2, **jobs},
        ),
        compaction=CompactionSettings(keep_last_n=3, trigger_messages=0),
    )


def _session(api: TestClient, user: str, session: str, count: int = 8) -> None:
    response = api.post(
        f"/v1/sessions/{session}/working/messages",
        json={
            "user_id": user,
            "messages": [
                {"role": "user", "content": f"message {n} about moving to Oslo"}
                for n in range(count)
            ],
        },
    )
    assert response.status_code == 200, response.text


def _wait_for(api: TestClient, user: str, job_id: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        job: dict[str, Any] = api.get(f"/v1/jobs/{job_id}", params={"user_id": user}).json()
        if job.get("status") == status or time.monotonic() > deadline:
            return job
        time.sleep(0.02)


def test_a_malformed_reply_is_retried_dead_lettered_and_replayed(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = _app(app_factory, llm_server)
    _session(api, "bob", "move")
    llm_server.default = "this is not {json at all"

    response = api.post("/v1/sessions/move/compact", params={"user_id": "bob"})
    assert response.status_code == 200, response.text
    job = response.json()["job"]
    assert job["kind"] == "compact"

    dead = _wait_for(api, "bob", job["id"], "dead")
    assert dead["status"] == "dead"
    assert dead["attempts"] == 2
    listed = api.get("/v1/jobs", params={"user_id": "bob", "status": "dead"}).json()["jobs"]
    assert [item["id"] for item in listed] == [job["id"]]
    assert "ModelOutputError" in listed[0]["last_error"]
    assert "this is not {json at all" in listed[0]["last_error"]  # the raw reply
    working = api.get("/v1/sessions/move/working", params={"user_id": "bob"}).json()
    assert working["message_count"] == 8  # nothing changed while it failed

    llm_server.default = GOOD
    replayed = api.post(f"/v1/jobs/{job['id']}/replay", params={"user_id": "bob"})
    assert replayed.status_code == 200, replayed.text
    assert replayed.json()["status"] in ("queued", "running", "done")
    assert _wait_for(api, "bob", job["id"], "done")["status"] == "done"
    working = api.get("/v1/sessions/move/working", params={"user_id": "bob"}).json()
    assert working["summary"] == "Bob is moving to Oslo."
    assert [m["content"] for m in working["messages"]] == [
        f"message {n} about moving to Oslo" for n in (5, 6, 7)
    ]


def test_jobs_are_confined_to_their_user(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = _app(app_factory, llm_server, max_attempts=1)
    llm_server.default = "no json"
    _session(api, "carol", "s1")
    job = api.post("/v1/sessions/s1/compact", params={"user_id": "carol"}).json()["job"]
    assert _wait_for(api, "carol", job["id"], "dead")["status"] == "dead"

    assert api.get(f"/v1/jobs/{job['id']}", params={"user_id": "dave"}).status_code == 404
    assert api.post(f"/v1/jobs/{job['id']}/replay", params={"user_id": "dave"}).status_code == 404
    assert api.get("/v1/jobs", params={"user_id": "dave", "status": "dead"}).json()["jobs"] == []
    assert api.get("/v1/jobs/j999999999999", params={"user_id": "carol"}).status_code == 404


def test_compact_with_wait_runs_inline(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = _app(app_factory, llm_server)
    _session(api, "erin", "s1", count=5)
    llm_server.reply(GOOD)
    response = api.post("/v1/sessions/s1/compact", params={"user_id": "erin", "wait": "true"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["job"] is None
    result = body["result"]
    assert result["summarised"] is True
    assert (result["kept"], result["removed"]) == (3, 2)
    assert result["summary"] == "Bob is moving to Oslo."
    assert result["tokens_after"] < result["tokens_before"]
    working = api.get("/v1/sessions/s1/working", params={"user_id": "erin"}).json()
    assert working["message_count"] == 3
    assert working["state"]["_memmachine"]["compactions"] == 1


def test_health_reports_the_queue_and_the_model(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = _app(app_factory, llm_server)
    health = api.get("/health").json()
    assert health["stores"]["jobs"]["status"] == "ok"
    assert health["llm"] == {"enabled": True, "model": "x", "reason": None}
    plain = app_factory()
    assert plain.get("/health").json()["llm"]["enabled"] is False


def test_dead_jobs_are_purged_per_user_and_never_across_tenants(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = app_factory(
        api_keys="key-acme=acme,key-globex=globex",
        llm=LlmSettings(base_url=llm_server.base_url, model="x", max_retries=0),
        jobs=JobSettings(max_attempts=1, backoff_base_seconds=0.0, poll_interval_seconds=0.02),
        compaction=CompactionSettings(keep_last_n=3, trigger_messages=0),
    )
    acme = {"Authorization": "Bearer key-acme"}
    globex = {"Authorization": "Bearer key-globex"}
    llm_server.default = "no json"

    def dead_job(headers: dict[str, str], session: str) -> str:
        response = api.post(
            f"/v1/sessions/{session}/working/messages",
            json={
                "user_id": "carol",
                "messages": [{"role": "user", "content": f"hello {n}"} for n in range(6)],
            },
            headers=headers,
        )
        assert response.status_code == 200, response.text
        job = api.post(
            f"/v1/sessions/{session}/compact", params={"user_id": "carol"}, headers=headers
        ).json()["job"]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = api.get(f"/v1/jobs/{job['id']}", params={"user_id": "carol"}, headers=headers)
            if got.json().get("status") == "dead":
                return str(job["id"])
            time.sleep(0.02)
        raise AssertionError("the job never died")

    first, second = dead_job(acme, "s1"), dead_job(acme, "s2")
    theirs = dead_job(globex, "s1")

    def dead_ids(headers: dict[str, str], user: str = "carol") -> set[str]:
        listed = api.get("/v1/jobs", params={"user_id": user, "status": "dead"}, headers=headers)
        return {job["id"] for job in listed.json()["jobs"]}

    # Another tenant (same user id) and another user of the tenant reach none of them.
    refused = api.delete(
        "/v1/jobs/dead", params={"user_id": "carol", "job_id": first}, headers=globex
    )
    assert refused.status_code == 404, refused.text
    assert api.delete("/v1/jobs/dead", params={"user_id": "dave"}, headers=acme).json() == {
        "purged": 0
    }
    assert api.delete("/v1/jobs/dead", params={"user_id": "carol"}, headers=globex).json() == {
        "purged": 1
    }
    assert dead_ids(globex) == set()
    assert dead_ids(acme) == {first, second}

    one = api.delete("/v1/jobs/dead", params={"user_id": "carol", "job_id": first}, headers=acme)
    assert one.json() == {"purged": 1}
    gone = api.get(f"/v1/jobs/{first}", params={"user_id": "carol"}, headers=acme)
    assert gone.status_code == 404
    again = api.delete("/v1/jobs/dead", params={"user_id": "carol", "job_id": first}, headers=acme)
    assert again.status_code == 404
    assert api.delete("/v1/jobs/dead", params={"user_id": "carol"}, headers=acme).json() == {
        "purged": 1
    }
    assert dead_ids(acme) == set()
    assert theirs not in dead_ids(acme)
    assert api.delete("/v1/jobs/dead", params={"user_id": "carol"}).status_code == 401


def test_done_jobs_are_gone_after_the_configured_retention(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = _app(app_factory, llm_server, done_retention_seconds=1.0)
    _session(api, "fay", "s1")
    llm_server.default = GOOD
    job = api.post("/v1/sessions/s1/compact", params={"user_id": "fay"}).json()["job"]
    assert _wait_for(api, "fay", job["id"], "done")["status"] == "done"
    deadline = time.monotonic() + 20
    while api.get(f"/v1/jobs/{job['id']}", params={"user_id": "fay"}).status_code == 200:
        assert time.monotonic() < deadline, "the done job was never removed"
        time.sleep(0.05)
    assert api.get(f"/v1/jobs/{job['id']}", params={"user_id": "fay"}).status_code == 404
    listed = api.get("/v1/jobs", params={"user_id": "fay"}).json()["jobs"]
    assert job["id"] not in {item["id"] for item in listed}
    assert all(item["status"] != "done" for item in listed)  # the idle check stays queued
    summary = api.get("/v1/sessions/s1/working", params={"user_id": "fay"}).json()["summary"]
    assert summary == "Bob is moving to Oslo."  # the job's work stays, only its record goes
