"""The SDK's compact(): inline (no model on the test server: keep-last-N truncation) and
queued (a job to follow)."""

from __future__ import annotations

from memmachine_sdk import AsyncMemMachineClient, MemMachineClient


def test_compact_inline_and_queued(server_url: str) -> None:
    with MemMachineClient(server_url, api_key="sdk-key", user_id="sdk-compact") as mm:
        mm.append_working("long", [f"note {n}" for n in range(25)])
        done = mm.compact("long", wait=True)
        assert done.job is None
        assert done.result is not None
        assert (done.result.kept, done.result.removed) == (20, 5)
        assert done.result.summarised is False
        assert [m.content for m in mm.get_working("long", last_n=1).messages] == ["note 24"]

        queued = mm.compact("long")
        assert queued.job is not None
        assert queued.job.kind == "compact"
        assert queued.job.session_id == "long"


async def test_async_compact(server_url: str) -> None:
    async with AsyncMemMachineClient(server_url, api_key="sdk-key", user_id="sdk-acompact") as mm:
        await mm.append_working("s", ["one", "two"])
        done = await mm.compact("s", wait=True)
        assert done.result is not None
        assert done.result.compacted is False  # nothing older than the newest 20
