"""Memory that expires, end to end on the embedded stores (FalkorDB graph and working
memory in the embedded Redis-compatible server, facts in SQLite), with a clock the test
moves: an episode and a fact written with an expiry are returned by every read before it
and by none from that instant on; the retention sweep then removes them from every store,
which a raw scan of the graph, the keys, the SQLite file and the append-only files checks.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from fastapi.testclient import TestClient

from memmachine.adapters.falkordb.embedded_falkordb import EmbeddedFalkorDBServer
from memmachine.bootstrap import build_manager
from memmachine.config import EmbeddingSettings, RetentionPolicy, RetentionSettings, Settings
from memmachine.manager import MemoryManager
from memmachine.models import NewMessage, Scope
from memmachine.portability.export import export_user
from memmachine.telemetry import Telemetry
from memmachine_server.app import create_app
from tests.fakes.clock import ManualClock
from tests.integration.test_write_path_safety import dump_redis
from tests.server.conftest import LOCAL, make_settings

SECRET = "zanzibar-kumquat-7351"
FACT_SECRET = "quokka-door-code-4412"
KEPT = "the user enjoys green tea in the morning"


def start(data_dir: Path, clock: ManualClock, **overrides: Any) -> TestClient:
    async def factory(settings: Settings, *, telemetry: Telemetry | None = None) -> MemoryManager:
        return await build_manager(settings, telemetry=telemetry, clock=clock)

    retention = overrides.pop("retention", RetentionSettings(sweep_interval_seconds=0))
    settings = make_settings(data_dir, retention=retention, **overrides)
    client = TestClient(create_app(settings, manager_factory=factory), base_url=LOCAL)
    client.__enter__()
    return client


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(tmp_path: Path, clock: ManualClock) -> Iterator[tuple[TestClient, Path]]:
    data_dir = (tmp_path / "data").resolve()
    client = start(data_dir, clock, forget_compaction_seconds=0)
    try:
        yield client, data_dir
    finally:
        client.__exit__(None, None, None)


def manager_of(api: TestClient) -> MemoryManager:
    manager: MemoryManager = api.app.state.memmachine.manager  # type: ignore[attr-defined]
    return manager


def export_text(api: TestClient, user: str) -> str:
    out = io.StringIO()
    api.portal.call(export_user, manager_of(api), Scope(user_id=user), out.write)  # type: ignore[union-attr]
    return out.getvalue()


def every_read(api: TestClient, user: str, episode_id: str, fact_id: str) -> dict[str, str]:
    """What each read path returns for ``user``, as text."""
    listed = api.get("/v1/memories", params={"user_id": user}).json()["episodes"]
    kept_id = next(item["id"] for item in listed if item["content"] == KEPT)
    return {
        "list": api.get("/v1/memories", params={"user_id": user}).text,
        "get": api.get(f"/v1/memories/{episode_id}", params={"user_id": user}).text,
        "search": api.post(
            "/v1/memories/search", json={"user_id": user, "query": f"{SECRET} {FACT_SECRET}"}
        ).text,
        "facts": api.get("/v1/profile", params={"user_id": user}).text,
        "fact": api.get(f"/v1/profile/facts/{fact_id}", params={"user_id": user}).text,
        "fact search": api.post(
            "/v1/profile/search", json={"user_id": user, "query": FACT_SECRET}
        ).text,
        "working": api.get("/v1/sessions/s1/working", params={"user_id": user}).text,
        "prompt": api.post(
            "/v1/memory-prompt",
            json={"user_id": user, "session_id": "s1", "query": "my one-time code, door code"},
        ).text,
        "export": export_text(api, user),
        "inspector": api.get(
            f"/v1/memories/{episode_id}/neighbours", params={"user_id": user}
        ).text,
        "inspector neighbours": api.get(
            f"/v1/memories/{kept_id}/neighbours", params={"user_id": user}
        ).text,
    }


def write_expiring(api: TestClient, clock: ManualClock, user: str) -> tuple[str, str]:
    """An episode living 5 s, a kept one, and a fact expiring 5 s from now; their ids."""
    added = api.post(
        "/v1/memories",
        json={
            "user_id": user,
            "session_id": "s1",
            "messages": [
                {"content": f"my one-time code is {SECRET}", "ttl_seconds": 5},
                {"content": KEPT},
            ],
        },
    )
    assert added.status_code == 201, added.text
    fact = api.post(
        "/v1/profile",
        json={
            "user_id": user,
            "facts": [
                {
                    "tag": "access",
                    "feature": "door_code",
                    "value": FACT_SECRET,
                    "expires_at": (clock.now() + timedelta(seconds=5)).isoformat(),
                },
                {"tag": "preferences", "feature": "drink", "value": "green tea"},
            ],
        },
    )
    assert fact.status_code in (200, 201), fact.text
    return added.json()["episode_ids"][0], fact.json()["facts"][0]["id"]


def raw_files(data_dir: Path) -> str:
    """Every byte of every file under the data directory, as text."""
    parts = []
    for path in sorted(data_dir.rglob("*")):
        if path.is_file() and not path.name.endswith(".sock"):
            parts.append(path.read_bytes().decode("latin-1"))
    return "\n".join(parts)


def rewrite_aof_and_checkpoint(data_dir: Path) -> None:
    """Have the embedded server rewrite its append-only file and snapshot (the old AOF
    still holds every write ever made until it is rewritten)."""

    async def run() -> None:
        socket = EmbeddedFalkorDBServer(data_dir).socket_path
        client = aioredis.Redis(unix_socket_path=str(socket), decode_responses=True)
        try:
            await client.execute_command("BGREWRITEAOF")
            for _ in range(600):
                info = await client.info("persistence")
                if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
                    break
                await asyncio.sleep(0.05)
            await client.save()
        finally:
            await client.aclose()

    asyncio.run(run())


def test_an_expiring_episode_and_fact_are_read_until_their_instant_then_never_and_erased(
    app: tuple[TestClient, Path], clock: ManualClock
) -> None:
    api, data_dir = app
    episode_id, fact_id = write_expiring(api, clock, "u1")

    before = every_read(api, "u1", episode_id, fact_id)
    for path, text in before.items():
        if path in {"fact", "fact search", "facts"}:
            assert FACT_SECRET in text, path
        elif path != "prompt":
            assert SECRET in text, path
    assert SECRET in before["prompt"]
    assert FACT_SECRET in before["prompt"]
    episode = api.get(f"/v1/memories/{episode_id}", params={"user_id": "u1"}).json()
    assert episode["metadata"]["expires_at"] == (clock.now() + timedelta(seconds=5)).isoformat()

    clock.advance(4.999)  # just before the instant: still there
    assert SECRET in api.get("/v1/memories", params={"user_id": "u1"}).text
    assert FACT_SECRET in api.get("/v1/profile", params={"user_id": "u1"}).text

    clock.advance(0.001)  # the instant itself: gone from every read
    after = every_read(api, "u1", episode_id, fact_id)
    for path, text in after.items():
        assert SECRET not in text, path
        assert FACT_SECRET not in text, path
    assert api.get(f"/v1/memories/{episode_id}", params={"user_id": "u1"}).status_code == 404
    assert api.get(f"/v1/profile/facts/{fact_id}", params={"user_id": "u1"}).status_code == 404
    # What did not expire is still read.
    assert KEPT in after["list"]
    assert KEPT in after["export"]
    assert "green tea" in after["facts"]

    # Before the sweep the stores still hold the text; after it, none does.
    assert SECRET in dump_redis(data_dir)
    report = api.portal.call(manager_of(api).retention.run)  # type: ignore[union-attr]
    assert (report.episodes_expired, report.facts_expired) == (1, 1)
    assert report.working_messages_removed == 1
    health = api.get("/health").json()
    assert "1 expired" in health["stores"]["retention"]["detail"]
    assert SECRET not in health["stores"]["retention"]["detail"]

    # the sweep compacted the stores' files itself (MEMMACHINE_FORGET_COMPACTION_SECONDS=0)
    everything = dump_redis(data_dir) + raw_files(data_dir)
    assert SECRET not in everything
    assert FACT_SECRET not in everything
    assert KEPT in dump_redis(data_dir)
    # A second sweep finds nothing left to remove.
    again = api.portal.call(manager_of(api).retention.run)  # type: ignore[union-attr]
    assert (again.episodes_expired, again.facts_expired, again.working_messages_removed) == (
        0,
        0,
        0,
    )


def test_a_search_that_runs_across_the_expiry_instant_returns_nothing_expired(
    app: tuple[TestClient, Path], clock: ManualClock
) -> None:
    api, _ = app
    write_expiring(api, clock, "u2")
    manager = manager_of(api)
    pipeline = manager.episodic_service.pipeline
    original = pipeline.run

    async def slow_run(*args: Any, **kwargs: Any) -> Any:
        hits = await original(*args, **kwargs)
        assert any(SECRET in hit.episode.content for hit in hits)  # found while still live
        clock.advance(5)  # ... and it expires before the search answers
        return hits

    pipeline.run = slow_run  # type: ignore[method-assign]
    try:
        found = api.post("/v1/memories/search", json={"user_id": "u2", "query": SECRET})
    finally:
        pipeline.run = original  # type: ignore[method-assign]
    assert found.status_code == 200, found.text
    assert SECRET not in found.text


def test_expiry_input_is_checked_and_refusals_name_the_field(
    app: tuple[TestClient, Path], clock: ManualClock
) -> None:
    api, _ = app
    cases = [
        ({"content": "x", "ttl_seconds": 0}, "ttl_seconds"),
        ({"content": "x", "ttl_seconds": 5, "expires_at": clock.now().isoformat()}, "ttl_seconds"),
        (
            {"content": "x", "expires_at": (clock.now() - timedelta(seconds=1)).isoformat()},
            "expires_at",
        ),
        ({"content": "x", "metadata": {"expires_at": "soon"}}, "expires_at"),
        # past the year 9999 (found by schemathesis as a 500 on /v1/profile)
        ({"content": "x", "ttl_seconds": 10**15}, "ttl_seconds"),
        ({"content": "x", "ttl_seconds": 300_000_000_000}, "ttl_seconds"),
    ]
    for message, field in cases:
        response = api.post(
            "/v1/memories", json={"user_id": "u3", "session_id": "s1", "messages": [message]}
        )
        assert response.status_code == 422, (message, response.text)
        assert field in response.text
        assert "Traceback" not in response.text
    assert api.get("/v1/memories", params={"user_id": "u3"}).json()["total"] == 0
    fact = {"tag": "preferences", "feature": "drink", "value": "tea", "ttl_seconds": 10**15}
    refused = api.post("/v1/profile", json={"user_id": "u3", "facts": [fact]})
    assert refused.status_code == 422, refused.text
    assert "ttl_seconds" in refused.text
    assert "Traceback" not in refused.text
    assert "tea" not in api.get("/v1/profile", params={"user_id": "u3"}).text


def test_a_policy_added_later_removes_old_transcripts_and_keeps_the_profile(
    tmp_path: Path, clock: ManualClock
) -> None:
    data_dir = (tmp_path / "data").resolve()
    api = start(data_dir, clock)
    try:
        added = api.post(
            "/v1/memories",
            json={
                "user_id": "u4",
                "session_id": "s1",
                "messages": [{"content": f"old transcript {SECRET}"}],
            },
        )
        assert added.status_code == 201, added.text
        facts = api.post(
            "/v1/profile",
            json={
                "user_id": "u4",
                "facts": [{"tag": "preferences", "feature": "drink", "value": "tea"}],
            },
        )
        assert facts.status_code in (200, 201), facts.text
        clock.advance(91 * 86_400)
        # No policy yet: nothing is removed however old.
        report = api.portal.call(manager_of(api).retention.run)  # type: ignore[union-attr]
        assert report.episodes_aged_out == 0
        assert SECRET in api.get("/v1/memories", params={"user_id": "u4"}).text
        # "Keep the profile, drop transcripts after 90 days": one policy line.
        manager_of(api).retention.settings = RetentionSettings(
            sweep_interval_seconds=0,
            policies=[RetentionPolicy(tenant="default", episodes_max_age_days=90)],
        )
        fresh = api.post(
            "/v1/memories",
            json={"user_id": "u4", "session_id": "s2", "messages": [{"content": KEPT}]},
        )
        assert fresh.status_code == 201
        report = api.portal.call(manager_of(api).retention.run)  # type: ignore[union-attr]
        assert report.episodes_aged_out == 1
        assert report.facts_aged_out == 0
        listed = api.get("/v1/memories", params={"user_id": "u4"}).text
        assert SECRET not in listed
        assert KEPT in listed
        assert "tea" in api.get("/v1/profile", params={"user_id": "u4"}).text
        assert SECRET not in json.dumps(dump_redis(data_dir))
    finally:
        api.__exit__(None, None, None)


def test_thousands_of_expired_episodes_are_erased_while_writes_continue(
    tmp_path: Path, clock: ManualClock
) -> None:
    data_dir = (tmp_path / "data").resolve()
    api = start(
        data_dir,
        clock,
        embedding=EmbeddingSettings(provider="none"),
        retention=RetentionSettings(sweep_interval_seconds=0, batch_size=300),
    )
    manager = manager_of(api)
    user = Scope(user_id="bulk", session_id="s1")
    expiring = 2_000

    async def write_expiring() -> None:
        for start_at in range(0, expiring, 100):
            batch = [
                NewMessage(content=f"ephemeral-{n:05d} gone soon", ttl_seconds=10)
                for n in range(start_at, start_at + 100)
            ]
            await manager.add_messages(user, batch, extract=False)

    async def sweep_while_writing() -> tuple[Any, int]:
        async def writer() -> int:
            written = 0
            for round_ in range(20):
                await manager.add_messages(
                    user.for_session("s2"),
                    [NewMessage(content=f"durable-{round_:03d}-{n}") for n in range(10)],
                    extract=False,
                )
                written += 10
            return written

        report, written = await asyncio.gather(manager.retention.run(), writer())
        return report, written

    try:
        api.portal.call(write_expiring)  # type: ignore[union-attr]
        listed = api.get("/v1/memories", params={"user_id": "bulk", "limit": 1}).json()
        assert listed["total"] == expiring
        clock.advance(10)
        report, written = api.portal.call(sweep_while_writing)  # type: ignore[union-attr]
        assert report.episodes_expired == expiring
        assert report.working_messages_removed > 0
        # Every write made during the sweep is there; nothing that expired is.
        page = api.get("/v1/memories", params={"user_id": "bulk", "limit": 1000}).json()
        assert page["total"] == written == 200
        assert all(item["content"].startswith("durable-") for item in page["episodes"])
        working = api.get("/v1/sessions/s1/working", params={"user_id": "bulk"}).json()
        assert working["messages"] == []
        rewrite_aof_and_checkpoint(data_dir)
        everything = dump_redis(data_dir) + raw_files(data_dir)
        assert "ephemeral-" not in everything
        assert "durable-019" in everything
    finally:
        api.__exit__(None, None, None)


def test_admin_route_sets_policies_runs_the_sweep_and_reports_counts(
    tmp_path: Path, clock: ManualClock
) -> None:
    data_dir = (tmp_path / "data").resolve()
    api = start(data_dir, clock, admin_key="adm-secret-key-0123456789")
    admin = {"Authorization": "Bearer adm-secret-key-0123456789"}
    try:
        manager = manager_of(api)
        user = Scope(user_id="u5", session_id="s1")
        api.portal.call(manager.add_messages, user, [NewMessage(content=SECRET)])  # type: ignore[union-attr]
        clock.advance(31 * 86_400)
        put = api.put(
            "/v1/admin/retention",
            json={"policies": [{"tenant": "default", "episodes_max_age_days": 30}]},
            headers=admin,
        )
        assert put.status_code == 200, put.text
        assert put.json()["policies"][0]["episodes_max_age_days"] == 30
        bad = api.put(
            "/v1/admin/retention",
            json={"policies": [{"tenant": "default", "episodes_max_age_days": -1}]},
            headers=admin,
        )
        assert bad.status_code == 422
        assert "episodes_max_age_days" in bad.text
        swept = api.post("/v1/admin/retention/sweep", headers=admin)
        assert swept.status_code == 200, swept.text
        assert swept.json()["episodes_aged_out"] == 1
        assert SECRET not in swept.text
        shown = api.get("/v1/admin/retention", headers=admin).json()
        assert shown["last_sweep"]["episodes_aged_out"] == 1
        _, total = api.portal.call(manager.list_episodes, user)  # type: ignore[union-attr]
        assert total == 0
        # A sweep without the admin key is refused.
        assert api.post("/v1/admin/retention/sweep").status_code in (401, 403)
    finally:
        api.__exit__(None, None, None)
