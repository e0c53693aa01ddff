"""A working-memory summary folded from an episode the retention sweep removes is dropped
(embedded stores, a clock the test moves): what the expired episode said must not live on
in the session's rolling summary, while a summary of live episodes is kept."""

from __future__ import annotations

import json
from pathlib import Path

from memmachine.models import NewMessage, Scope
from memmachine.pipeline.compaction import RESERVED_STATE_KEY, covered_ids
from tests.fakes.clock import ManualClock
from tests.integration.test_expiry import manager_of, rewrite_aof_and_checkpoint, start
from tests.integration.test_write_path_safety import dump_redis

SECRET = "summary-held-pin-3390"


def test_a_summary_folded_from_an_expired_episode_is_dropped_by_the_sweep(
    tmp_path: Path,
) -> None:
    data_dir = (tmp_path / "data").resolve()
    clock = ManualClock()
    api = start(data_dir, clock)
    try:
        manager = manager_of(api)
        gone, kept = Scope(user_id="sum", session_id="s1"), Scope(user_id="sum", session_id="s2")
        said = [NewMessage(content=f"my pin is {SECRET}", ttl_seconds=5)]
        [expiring] = api.portal.call(manager.add_messages, gone, said)  # type: ignore[union-attr]
        [durable] = api.portal.call(  # type: ignore[union-attr]
            manager.add_messages, kept, [NewMessage(content="I like hiking")]
        )
        # What a compaction leaves: the messages folded into the summary, and their ids.
        for scope, episode, summary in (
            (gone, expiring, f"The user's pin is {SECRET}."),
            (kept, durable, "The user likes hiking."),
        ):
            state = {RESERVED_STATE_KEY: {"summary_covers": [episode.id], "compactions": 1}}
            api.portal.call(  # type: ignore[union-attr]
                lambda s=scope, st=state, su=summary: manager.working.put(
                    s, messages=[], state=st, summary=su, ttl_seconds=3600
                )
            )
        clock.advance(5)

        report = api.portal.call(manager.retention.run)  # type: ignore[union-attr]
        assert report.episodes_expired == 1
        assert report.working_summaries_dropped == 1
        dropped = api.get("/v1/sessions/s1/working", params={"user_id": "sum"}).json()
        assert not dropped["summary"]
        assert SECRET not in json.dumps(dropped)
        held = api.portal.call(manager.working.get, gone)  # type: ignore[union-attr]
        assert held is not None
        assert covered_ids(held.state) == []
        assert held.state[RESERVED_STATE_KEY]["compactions"] == 1
        live = api.get("/v1/sessions/s2/working", params={"user_id": "sum"}).json()
        assert live["summary"] == "The user likes hiking."
        rewrite_aof_and_checkpoint(data_dir)
        assert SECRET not in json.dumps(dump_redis(data_dir))
    finally:
        api.__exit__(None, None, None)
