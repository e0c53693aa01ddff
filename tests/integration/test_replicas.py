"""Several replicas, one truth: two ``memmachine serve`` processes and one ``memmachine worker``
on the same production stores (the episode store on a FalkorDB server, then on Neo4j;
PostgreSQL; Redis; all started by the test session), as a load balancer would spread a
client over them.

* A write acknowledged by one replica is found by the very next search on the other (the
  stated bound: no wait, no retry; see the README's "Several replicas").
* Deletes and forgets through one are never returned by the other.
* A key's rate limit holds across both (one bucket in Redis, not one per process).
* A worker killed in the middle of a job leaves it to the next worker once its lease
  passes, and that worker's log lines for the job carry the request id of the request
  that queued it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import drop_redis_keys, empty_neo4j, temporary_postgres_database
from tests.fakes.llm_server import Reply, ScriptedChatServer
from tests.integration.conftest import neo4j_settings

KEY = "replica-test-key-0123456789"
ADMIN = "replica-admin-key-0123456789"
GOOD = '{"text": "Ana planned her move to Oslo.", "covered_ids": []}'


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Process:
    """A ``memmachine`` child process and its JSON log (stderr is a file, not a terminal)."""

    process: subprocess.Popen[bytes]
    log: Path
    port: int = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def lines(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far."""
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclass
class Cluster:
    """Replicas ``a`` and ``b``, the ``worker``, the stores' environment and the LLM."""

    env: dict[str, str]
    workdir: Path
    llm: ScriptedChatServer
    a: Process = field(init=False)
    b: Process = field(init=False)
    worker: Process = field(init=False)
    started: list[Process] = field(default_factory=list)

    def spawn(self, name: str, command: str, extra: dict[str, str] | None = None) -> Process:
        log = self.workdir / f"{name}.log"
        env = {**self.env, "MEMMACHINE_DATA_DIR": str(self.workdir / name), **(extra or {})}
        args = [sys.executable, "-m", "memmachine_server.cli", command]
        port = 0
        if command == "serve":
            port = _free_port()
            args += ["--host", "127.0.0.1", "--port", str(port)]
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
            )
        started = Process(process, log, port)
        self.started.append(started)
        return started

    def client(self, replica: Process) -> httpx.Client:
        return httpx.Client(
            base_url=replica.base, timeout=60, headers={"Authorization": f"Bearer {KEY}"}
        )


def _wait_healthy(replica: Process, within: float = 180.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if replica.process.poll() is not None:
            raise AssertionError(f"replica exited: {replica.log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{replica.base}/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"replica not healthy: {replica.log.read_text()[-3000:]}")


def _until(check: Callable[[], bool], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture(scope="module", params=["falkordb-server", "neo4j"])
def graph_store(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The episode store's settings: a graph of its own on the FalkorDB server, or the
    Neo4j server (emptied before and after: it has one database)."""
    if request.param == "neo4j":
        target = request.getfixturevalue("neo4j_target")
        empty_neo4j(target)
        yield neo4j_settings(target)
        empty_neo4j(target)
        return
    url = request.getfixturevalue("falkordb_server_url")
    port = int(url.rsplit(":", 1)[1])
    graph = f"replicas_{uuid.uuid4().hex[:10]}"
    yield {
        "MEMMACHINE_EPISODE_STORE_URL": f"falkordb://127.0.0.1:{port}",
        "MEMMACHINE_GRAPH_NAME": graph,
    }
    with redis.Redis(port=port) as graphs:
        if graph in graphs.execute_command("GRAPH.LIST"):
            graphs.execute_command("GRAPH.DELETE", graph)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    graph_store: dict[str, str],
    postgres_admin_url: str,
    redis_service_url: str,
    model_dir: Path,
) -> Iterator[Cluster]:
    prefix = f"mmtest-{uuid.uuid4().hex[:10]}"
    workdir = tmp_path_factory.mktemp("replicas")
    with (
        temporary_postgres_database(postgres_admin_url) as profile_url,
        ScriptedChatServer() as llm,
    ):
        llm.default = GOOD
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMMACHINE_", "OTEL_"))}
        env.update(
            {
                **graph_store,
                "MEMMACHINE_PROFILE_STORE_URL": profile_url,
                "MEMMACHINE_WORKING_STORE_URL": redis_service_url,
                "MEMMACHINE_WORKING_KEY_PREFIX": prefix,
                "MEMMACHINE_JOBS_KEY_PREFIX": prefix,
                "MEMMACHINE_EMBEDDING_MODEL": str(model_dir),
                "MEMMACHINE_API_KEYS": f"{KEY}=acme",
                "MEMMACHINE_ADMIN_KEY": ADMIN,
                "MEMMACHINE_KEY_REFRESH_SECONDS": "0.5",
                "MEMMACHINE_LLM_BASE_URL": llm.base_url,
                "MEMMACHINE_LLM_MODEL": "x",
                "MEMMACHINE_LLM_MAX_RETRIES": "0",
                "MEMMACHINE_EXTRACTION_ENABLED": "false",
                "MEMMACHINE_COMPACTION_KEEP_LAST_N": "2",
                "MEMMACHINE_COMPACTION_TRIGGER_MESSAGES": "0",
                "MEMMACHINE_COMPACTION_IDLE_SECONDS": "0",
                "MEMMACHINE_JOBS_IN_PROCESS_WORKER": "false",
                "MEMMACHINE_JOBS_POLL_INTERVAL_SECONDS": "0.05",
                "MEMMACHINE_LOG_FORMAT": "json",
            }
        )
        cluster = Cluster(env, workdir, llm)
        try:
            cluster.a = cluster.spawn("a", "serve")
            cluster.b = cluster.spawn("b", "serve")
            # a short lease, so the takeover test need not wait long for it to pass
            cluster.worker = cluster.spawn(
                "worker", "worker", {"MEMMACHINE_JOBS_LEASE_SECONDS": "3"}
            )
            _wait_healthy(cluster.a)
            _wait_healthy(cluster.b)
            yield cluster
        finally:
            for process in cluster.started:
                process.stop()
            drop_redis_keys(redis_service_url, f"*{prefix}*")


def _add(client: httpx.Client, user: str, session: str, text: str) -> str:
    body = {
        "user_id": user,
        "session_id": session,
        "messages": [{"role": "user", "producer": user, "content": text}],
    }
    response = client.post("/v1/memories", json=body)
    assert response.status_code == 201, response.text
    episode: str = response.json()["episode_ids"][0]
    return episode


def _found(client: httpx.Client, user: str, query: str) -> list[str]:
    response = client.post(
        "/v1/memories/search", json={"user_id": user, "query": query, "top_k": 20}
    )
    assert response.status_code == 200, response.text
    return [hit["id"] for hit in response.json()["episodic"]]


def _working(client: httpx.Client, user: str, session: str) -> tuple[int, int]:
    """The session's working memory as (version, message count)."""
    response = client.get(f"/v1/sessions/{session}/working", params={"user_id": user})
    assert response.status_code == 200, response.text
    return response.json()["version"], response.json()["message_count"]


def test_a_write_acknowledged_by_one_replica_is_found_by_the_next_search_on_the_other(
    cluster: Cluster,
) -> None:
    """Both ways, twenty times, each time the first search after the acknowledgement: the
    other replica's index catches up from the store's ledger before it answers."""
    user = f"raw-{uuid.uuid4().hex[:6]}"
    with cluster.client(cluster.a) as a, cluster.client(cluster.b) as b:
        for round_ in range(20):
            writer, reader = (a, b) if round_ % 2 == 0 else (b, a)
            text = f"note {round_}: the {['red', 'blue'][round_ % 2]} kayak number {round_}"
            episode = _add(writer, user, f"s{round_ % 3}", text)
            assert episode in _found(reader, user, f"kayak number {round_}"), round_
            listed = reader.get("/v1/memories", params={"user_id": user, "limit": 100})
            assert listed.json()["total"] == round_ + 1


def test_deletes_and_forgets_through_one_replica_never_resurface_on_the_other(
    cluster: Cluster,
) -> None:
    user = f"del-{uuid.uuid4().hex[:6]}"
    with cluster.client(cluster.a) as a, cluster.client(cluster.b) as b:
        gone = _add(a, user, "s1", "the submarine is yellow")
        kept = _add(a, user, "s1", "the submarine has a periscope")
        other = _add(a, user, "s2", "the harbour is quiet at dawn")
        assert {gone, kept} <= set(_found(b, user, "submarine"))  # b's index holds them

        assert a.delete(f"/v1/memories/{gone}", params={"user_id": user}).status_code == 204
        assert gone not in _found(b, user, "yellow submarine")
        assert b.get(f"/v1/memories/{gone}", params={"user_id": user}).status_code == 404
        assert kept in _found(b, user, "submarine")
        # each add also went to working memory, and the deleted episode left it with its store
        assert _working(b, user, "s1")[1] == 1

        fact = {"user_id": user, "facts": [{"tag": "boat", "feature": "colour", "value": "teal"}]}
        assert a.post("/v1/profile", json=fact).status_code in (200, 201)
        facts = b.get("/v1/profile", params={"user_id": user}).json()["facts"]
        assert [item["value"] for item in facts] == ["teal"]

        forgot = a.delete("/v1/sessions/s1", params={"user_id": user})
        assert forgot.status_code == 200, forgot.text
        assert not {gone, kept} & set(_found(b, user, "submarine periscope"))
        assert _working(b, user, "s1") == (0, 0)  # what a session never written reads as
        assert other in _found(b, user, "harbour dawn")

        assert a.delete(f"/v1/users/{user}").status_code == 200
        assert _found(b, user, "harbour dawn") == []
        assert b.get("/v1/memories", params={"user_id": user}).json()["total"] == 0
        assert b.get("/v1/profile", params={"user_id": user}).json()["facts"] == []
        assert _working(b, user, "s2") == (0, 0)  # what a session never written reads as


def test_a_keys_rate_limit_holds_across_replicas(cluster: Cluster) -> None:
    """Three requests a minute (one more every 20 s): three pass in all, whichever replica
    serves them, and both refuse the rest with a Retry-After."""
    created = httpx.post(
        f"{cluster.a.base}/v1/admin/keys",
        json={"tenant": "limited", "name": "slow", "rate_limit_per_minute": 3},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=30,
    )
    assert created.status_code == 201, created.text
    headers = {"Authorization": f"Bearer {created.json()['key']}"}
    statuses: list[tuple[str, int]] = []
    for n in range(8):
        replica = cluster.a if n % 2 == 0 else cluster.b
        response = httpx.get(
            f"{replica.base}/v1/memories", params={"user_id": "u"}, headers=headers, timeout=30
        )
        statuses.append((replica.base, response.status_code))
        if response.status_code == 429:
            assert int(response.headers["retry-after"]) >= 1
    assert sum(code == 200 for _, code in statuses) == 3, statuses
    assert {code for _, code in statuses} == {200, 429}
    assert {base for base, code in statuses if code == 429} == {cluster.a.base, cluster.b.base}


def test_a_worker_killed_mid_job_is_taken_over_by_another(cluster: Cluster) -> None:
    user = f"job-{uuid.uuid4().hex[:6]}"
    request_id = f"takeover-{uuid.uuid4().hex[:8]}"
    cluster.llm.reply(Reply(content=GOOD, delay=30.0))  # the first worker's call hangs
    with cluster.client(cluster.a) as a, cluster.client(cluster.b) as b:
        messages = [{"role": "user", "content": f"moving to Oslo, step {n}"} for n in range(6)]
        written = a.post(
            "/v1/sessions/move/working/messages", json={"user_id": user, "messages": messages}
        )
        assert written.status_code == 200, written.text
        queued = a.post(
            "/v1/sessions/move/compact",
            params={"user_id": user},
            headers={"X-Request-ID": request_id},
        )
        assert queued.status_code == 200, queued.text
        job_id = queued.json()["job"]["id"]

        def status() -> str:
            job: dict[str, Any] = b.get(f"/v1/jobs/{job_id}", params={"user_id": user}).json()
            return str(job["status"])

        _until(lambda: status() == "running" and len(cluster.llm.requests) >= 1)
        cluster.worker.process.kill()  # mid-job: its LLM call has not answered
        cluster.worker.process.wait()
        successor = cluster.spawn(
            "worker2",
            "worker",
            {"MEMMACHINE_METRICS_WORKER_PORT": str(metrics_port := _free_port())},
        )
        _until(lambda: status() == "done", within=120)

        job = b.get(f"/v1/jobs/{job_id}", params={"user_id": user}).json()
        assert job["attempts"] == 2
        assert "lease" in job["last_error"]
        assert job["request_id"] == request_id
        working = a.get("/v1/sessions/move/working", params={"user_id": user}).json()
        assert working["summary"] == "Ana planned her move to Oslo."
        assert [m["content"] for m in working["messages"]] == [
            f"moving to Oslo, step {n}" for n in (4, 5)
        ]

    job_lines = [line for line in successor.lines() if job_id in line.get("message", "")]
    assert job_lines, successor.log.read_text()[-2000:]
    assert all(line.get("request_id") == request_id for line in job_lines)
    accepted = [
        line
        for line in cluster.a.lines()
        if line.get("logger") == "memmachine.access" and line.get("request_id") == request_id
    ]
    assert [(line["route"], line["status"]) for line in accepted] == [
        ("/v1/sessions/{session_id}/compact", 200)
    ]

    scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    finished = {
        (sample.labels["kind"], sample.labels["outcome"]): sample.value
        for family in text_string_to_metric_families(scraped)
        if family.name == "memmachine_jobs_finished"
        for sample in family.samples
        if sample.name == "memmachine_jobs_finished_total"
    }
    assert finished == {("compact", "done"): 1.0}
