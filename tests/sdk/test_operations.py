"""The SDK's calls for fact invalidation, background jobs, API keys and the inspector,
sync and async, against a live server with a scripted model (for jobs that fail and are
replayed) and an admin key."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memmachine.config import CompactionSettings, ExtractionSettings, JobSettings, LlmSettings
from memmachine_sdk import (
    AsyncClient,
    Client,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    UnauthorizedError,
)
from memmachine_sdk import models as m
from tests.fakes.llm_server import ScriptedChatServer
from tests.sdk.conftest import live_server
from tests.server.conftest import make_settings

ADMIN = "admin-secret-ops"
KEY = "ops-key"
GOOD = json.dumps({"text": "Pia is moving to Oslo.", "covered_ids": []})


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedChatServer]:
    with ScriptedChatServer() as server:
        yield server


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory, model: ScriptedChatServer) -> Iterator[str]:
    settings = make_settings(
        Path(tmp_path_factory.mktemp("ops")),
        api_keys=f"{KEY}=t1",
        admin_key=ADMIN,
        llm=LlmSettings(base_url=model.base_url, model="x", max_retries=0),
        jobs=JobSettings(
            max_attempts=1,
            backoff_base_seconds=0.0,
            backoff_max_seconds=0.0,
            poll_interval_seconds=0.02,
        ),
        compaction=CompactionSettings(keep_last_n=2, trigger_messages=0),
        # No fact extraction: the only jobs are the compactions the tests ask for.
        extraction=ExtractionSettings(enabled=False),
    )
    with live_server(settings) as base:
        yield base


def _wait(mm: Client, job_id: str, status: str) -> m.JobOut:
    deadline = time.monotonic() + 20
    job = mm.get_job(job_id)
    while job.status != status and time.monotonic() < deadline:
        time.sleep(0.02)
        job = mm.get_job(job_id)
    return job


def test_inspector_reads_and_fact_invalidation(url: str) -> None:
    with Client(url, api_key=KEY, user_id="ops-ana") as mm:
        me = mm.whoami()
        assert (me.tenant, me.can_write, me.is_admin) == ("t1", True, False)
        ids = mm.add(["first visit", "second visit", "third visit"], session_id="vet").episode_ids
        fact = mm.set_profile([{"tag": "pets", "feature": "dog", "value": "Toast"}])[0]

        assert "ops-ana" in [user.user_id for user in mm.list_users(prefix="ops-").users]
        user = mm.get_user("ops-ana")
        assert (user.episodes, user.sessions, user.facts) == (3, 1, 1)
        sessions = mm.list_sessions("ops-ana")
        assert [s.session_id for s in sessions.sessions] == ["vet"]
        assert [s.session_id for s in sessions.working] == ["vet"]
        assert sum(bucket.count for bucket in mm.timeline("ops-ana").buckets) == 3
        preview = mm.forget_preview("ops-ana", session_id="vet")
        assert (preview.episodes, preview.working_sessions) == (3, 1)
        around = mm.neighbours(ids[1], before=1, after=1)
        assert [e.content for e in [*around.before, around.episode, *around.after]] == [
            "first visit",
            "second visit",
            "third visit",
        ]

        history = mm.invalidate_fact(fact.id, reason="Toast was rehomed")
        assert history.current is None
        assert [(v.value, v.reason) for v in history.history] == [("Toast", "Toast was rehomed")]
        assert mm.get_profile() == []
        assert mm.profile_history("pets", "dog").history[0].reason == "Toast was rehomed"
        with pytest.raises(NotFoundError):
            mm.get_user("ops-nobody")


def test_jobs_fail_are_listed_replayed_and_purged(url: str, model: ScriptedChatServer) -> None:
    with Client(url, api_key=KEY, user_id="ops-pia") as mm:
        mm.append_working("move", [f"message {n} about Oslo" for n in range(6)])
        model.default = "not json"
        first = mm.compact("move").job
        assert first is not None
        assert _wait(mm, first.id, "dead").status == "dead"
        assert [job.id for job in mm.list_jobs(status="dead")] == [first.id]
        assert mm.job_counts("ops-pia").dead == 1
        with pytest.raises(NotFoundError):
            mm.get_job(first.id, user_id="ops-other")

        model.default = GOOD
        assert mm.replay_job(first.id).status in ("queued", "running", "done")
        assert _wait(mm, first.id, "done").status == "done"
        assert mm.get_working("move").summary == "Pia is moving to Oslo."
        with pytest.raises(ConflictError):
            mm.replay_job(first.id)  # done, not dead

        mm.append_working("move", [f"more {n}" for n in range(6)])
        model.default = "not json"
        second = mm.compact("move").job
        assert second is not None
        assert _wait(mm, second.id, "dead").status == "dead"
        assert mm.purge_dead_jobs() == 1
        assert mm.list_jobs(status="dead") == []
        with pytest.raises(NotFoundError):
            mm.get_job(second.id)


def test_keys_are_created_listed_and_revoked(url: str) -> None:
    with Client(url, api_key=ADMIN) as admin:
        created = admin.create_key(tenant="t-ro", name="reader", permissions=["read"])
        assert created.key
        assert created.permissions == ["read"]
        assert created.id in [key.id for key in admin.list_keys(tenant="t-ro")]
        with Client(url, api_key=created.key, user_id="ro-user") as reader:
            me = reader.whoami()
            assert (me.tenant, me.can_read, me.can_write) == ("t-ro", True, False)
            with pytest.raises(PermissionDeniedError):
                reader.add(["not allowed"], session_id="s")
            assert admin.revoke_key(created.id).revoked_at is not None
            with pytest.raises(UnauthorizedError):
                reader.whoami()
    with Client(url, api_key=KEY) as tenant_key, pytest.raises(PermissionDeniedError):
        tenant_key.list_keys()


def test_retention_policies_are_read_replaced_and_swept(url: str) -> None:
    with Client(url, api_key=KEY, user_id="ret-user") as mm:
        old = mm.add(
            [{"content": "transcript from long ago", "timestamp": "2020-01-01T00:00:00Z"}],
            session_id="old",
        ).episode_ids
        mm.set_profile([{"tag": "home", "feature": "city", "value": "Porto"}])
    with Client(url, api_key=ADMIN) as admin:
        answer = admin.set_retention([{"tenant": "t1", "episodes_max_age_days": 90}])
        assert [(p.tenant, p.episodes_max_age_days) for p in answer.policies] == [("t1", 90)]
        assert admin.get_retention().policies == answer.policies
        report = admin.run_retention_sweep()
        assert report.episodes_aged_out >= 1
        assert admin.get_retention().last_sweep is not None
    with Client(url, api_key=KEY, user_id="ret-user") as mm:
        with pytest.raises(NotFoundError):
            mm.get_episode(old[0])
        assert [f.value for f in mm.get_profile()] == ["Porto"]  # keep the profile


async def test_async_client_covers_the_same_calls(url: str, model: ScriptedChatServer) -> None:
    async with AsyncClient(url, api_key=KEY, user_id="ops-async") as mm:
        assert (await mm.whoami()).tenant == "t1"
        ids = (await mm.add(["one", "two"], session_id="a")).episode_ids
        facts = await mm.set_profile([{"tag": "home", "feature": "city", "value": "Lyon"}])
        assert (await mm.get_user("ops-async")).episodes == 2
        assert [s.session_id for s in (await mm.list_sessions("ops-async")).sessions] == ["a"]
        assert sum(b.count for b in (await mm.timeline("ops-async")).buckets) == 2
        assert (await mm.forget_preview("ops-async")).facts == 1
        assert [e.content for e in (await mm.neighbours(ids[0], after=1)).after] == ["two"]
        assert "ops-async" in [u.user_id for u in (await mm.list_users(prefix="ops-a")).users]
        closed = await mm.invalidate_fact(facts[0].id)
        assert [v.value for v in closed.history] == ["Lyon"]

        await mm.append_working("a", [f"m{n}" for n in range(6)])
        model.default = "not json"
        job = (await mm.compact("a")).job
        assert job is not None
        deadline = time.monotonic() + 20
        while (await mm.get_job(job.id)).status != "dead" and time.monotonic() < deadline:
            await asyncio_sleep()
        assert [j.id for j in await mm.list_jobs(status="dead")] == [job.id]
        assert (await mm.job_counts("ops-async")).dead == 1
        model.default = GOOD
        assert (await mm.replay_job(job.id)).id == job.id
        assert await mm.purge_dead_jobs() == 0  # the replayed job is no longer dead
    async with AsyncClient(url, api_key=ADMIN) as admin:
        created = await admin.create_key(tenant="t-async")
        assert [k.id for k in await admin.list_keys(tenant="t-async")] == [created.id]
        assert (await admin.revoke_key(created.id)).revoked_at is not None
        assert (await admin.get_retention()).policies is not None
        assert (await admin.run_retention_sweep()).users >= 0


async def asyncio_sleep() -> None:
    import asyncio

    await asyncio.sleep(0.02)
