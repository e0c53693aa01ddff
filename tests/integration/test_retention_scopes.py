"""The retention sweep visits every project that holds data, not only those the settings
or a policy name: an expired episode, fact and working-memory message of a project nobody
configured are erased all the same (embedded stores, a clock the test moves)."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

from memmachine.models import ProjectScope
from tests.fakes.clock import ManualClock
from tests.integration.test_expiry import manager_of, raw_files, rewrite_aof_and_checkpoint, start
from tests.integration.test_write_path_safety import dump_redis

SECRET = "unnamed-project-secret-5521"
FACT_SECRET = "unnamed-project-fact-8830"
WHERE = {"org_id": "org-nobody-named", "project_id": "proj-nobody-named"}


def test_a_project_named_nowhere_still_has_its_expired_memories_erased(tmp_path: Path) -> None:
    data_dir = (tmp_path / "data").resolve()
    clock = ManualClock()
    api = start(data_dir, clock)
    try:
        sweep = manager_of(api).retention
        unnamed = ProjectScope(tenant="default", **WHERE)
        assert unnamed not in sweep.settings.swept_projects()
        assert not any(p.org_id == unnamed.org_id for p in sweep.settings.policies)
        added = api.post(
            "/v1/memories",
            json={
                **WHERE,
                "user_id": "u1",
                "session_id": "s1",
                "messages": [{"content": f"code {SECRET}", "ttl_seconds": 5}],
            },
        )
        assert added.status_code == 201, added.text
        expires = (clock.now() + timedelta(seconds=5)).isoformat()
        fact = {"tag": "access", "feature": "code", "value": FACT_SECRET, "expires_at": expires}
        facts = api.post("/v1/profile", json={**WHERE, "user_id": "u1", "facts": [fact]})
        assert facts.status_code in (200, 201), facts.text
        clock.advance(5)

        report = api.portal.call(sweep.run)  # type: ignore[union-attr]
        assert (report.episodes_expired, report.facts_expired) == (1, 1)
        assert report.working_messages_removed == 1
        rewrite_aof_and_checkpoint(data_dir)
        with sqlite3.connect(data_dir / "profile.db") as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        everything = json.dumps(dump_redis(data_dir)) + raw_files(data_dir)
        assert SECRET not in everything
        assert FACT_SECRET not in everything
    finally:
        api.__exit__(None, None, None)
