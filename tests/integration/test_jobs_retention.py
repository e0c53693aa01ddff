"""A tenant's jobs retention policy (``jobs_max_age_days``): the sweep erases the done and
dead jobs of that tenant's users, records and payloads, once older than the policy, and
leaves queued jobs and other tenants' jobs alone (embedded stores, a clock the test moves)."""

from __future__ import annotations

from pathlib import Path

from memmachine.config import RetentionPolicy, RetentionSettings
from memmachine.models import NewMessage, Scope
from tests.fakes.clock import ManualClock
from tests.integration.test_expiry import (
    manager_of,
    raw_files,
    rewrite_aof_and_checkpoint,
    start,
)

PAYLOAD_SECRET = "job-payload-secret-2741"
OTHER_NOTE = "globex-job-note-5150"


def test_done_and_dead_jobs_older_than_the_policy_are_erased(tmp_path: Path) -> None:
    data_dir = (tmp_path / "data").resolve()
    clock = ManualClock()
    policy = RetentionPolicy(tenant="default", jobs_max_age_days=30)
    retention = RetentionSettings(sweep_interval_seconds=0, policies=[policy])
    api = start(data_dir, clock, retention=retention)
    try:
        manager = manager_of(api)
        jobs = manager.jobs
        assert jobs is not None
        user = Scope(user_id="jobs-user", session_id="s1")
        other = Scope(tenant="globex", user_id="jobs-user", session_id="s1")
        for scope in (user, other):
            api.portal.call(manager.add_messages, scope, [NewMessage(content="hello")])  # type: ignore[union-attr]

        async def finished(scope: Scope, key: str, note: str) -> str:
            payload = {"note": note}
            job = await jobs.enqueue(scope, "retention-test", payload, idempotency_key=key)
            claimed = await jobs.claim("test-worker", kinds=["retention-test"])
            assert claimed is not None
            assert claimed.id == job.id
            await jobs.complete(job.id, "test-worker")
            return job.id

        done = api.portal.call(finished, user, "done-1", PAYLOAD_SECRET)  # type: ignore[union-attr]
        kept_elsewhere = api.portal.call(finished, other, "done-1", OTHER_NOTE)  # type: ignore[union-attr]
        waiting = api.portal.call(  # type: ignore[union-attr]
            lambda: jobs.enqueue(user, "retention-test", {}, idempotency_key="waiting")
        )

        report = api.portal.call(manager.retention.run)  # type: ignore[union-attr]
        assert report.jobs_removed == 0  # not old enough yet
        clock.advance(31 * 86_400)
        report = api.portal.call(manager.retention.run)  # type: ignore[union-attr]
        assert report.jobs_removed == 1
        assert api.portal.call(jobs.get, user, done) is None  # type: ignore[union-attr]
        assert api.portal.call(jobs.get, user, waiting.id) is not None  # type: ignore[union-attr]
        assert api.portal.call(jobs.get, other, kept_elsewhere) is not None  # type: ignore[union-attr]
        rewrite_aof_and_checkpoint(data_dir)
        everything = raw_files(data_dir)
        assert PAYLOAD_SECRET not in everything
        assert OTHER_NOTE in everything  # globex has no policy: its job stays
    finally:
        api.__exit__(None, None, None)
