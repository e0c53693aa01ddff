"""``profile_history`` in the SDK, sync and async, against a live server."""

from __future__ import annotations

from memmachine_sdk import AsyncMemMachineClient, MemMachineClient


def test_sync_profile_history(server_url: str) -> None:
    with MemMachineClient(server_url, api_key="sdk-key", user_id="sdk-history") as mm:
        mm.set_profile([{"tag": "home", "feature": "city", "value": "Porto"}])
        mm.set_profile([{"tag": "home", "feature": "city", "value": "Lisbon"}])
        history = mm.profile_history("home", "city")
        assert history.current is not None
        assert history.current.value == "Lisbon"
        assert [v.value for v in history.history] == ["Porto"]
        assert history.history[0].reason == "superseded"


async def test_async_profile_history(server_url: str) -> None:
    async with AsyncMemMachineClient(
        server_url, api_key="sdk-key", user_id="sdk-history-async"
    ) as mm:
        history = await mm.profile_history("home", "city")
        assert history.current is None
        assert history.history == []
