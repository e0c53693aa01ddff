"""Attachments in the SDK, sync and async, against a live server: inline with ``add``,
uploaded, downloaded, found by text and deleted."""

from __future__ import annotations

import base64

import pytest

from memmachine_sdk import AsyncMemMachineClient, MemMachineClient
from memmachine_sdk.errors import MemMachineAPIError, NotFoundError

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def test_sync_upload_download_and_inline_attachments(server_url: str) -> None:
    with MemMachineClient(server_url, api_key="sdk-key", user_id="sdk-att") as mm:
        uploaded = mm.upload_attachment(
            PNG,
            filename="map.png",
            mime="image/png",
            caption="hand-drawn map of the island",
            session_id="trip",
        )
        (episode_id,) = uploaded.episode_ids
        got = mm.download_attachment(episode_id)
        assert (got.content, got.mime, got.name) == (PNG, "image/png", "map.png")
        hits = mm.search("island map", types=["episodic"]).episodic
        assert hits[0].id == episode_id
        assert hits[0].metadata["attachment"]["size"] == len(PNG)

        inline = {
            "data_uri": "data:text/plain;base64," + base64.b64encode(b"ferry at 7:40").decode(),
            "name": "ferry.txt",
        }
        added = mm.add([{"content": "timetable", "attachments": [inline]}], session_id="trip")
        assert mm.download_attachment(added.episode_ids[1]).content == b"ferry at 7:40"

        mm.delete_episode(episode_id)
        with pytest.raises(NotFoundError):
            mm.download_attachment(episode_id)
        with pytest.raises(MemMachineAPIError) as refused:
            mm.upload_attachment(
                b"II*\x00", filename="scan.tiff", mime="image/tiff", caption="x", session_id="t"
            )
        assert refused.value.status == 415


async def test_async_upload_and_download(server_url: str) -> None:
    async with AsyncMemMachineClient(server_url, api_key="sdk-key", user_id="sdk-att-a") as mm:
        uploaded = await mm.upload_attachment(
            PNG, filename="x.png", mime="image/png", caption="a lighthouse at dusk", session_id="s"
        )
        got = await mm.download_attachment(uploaded.episode_ids[0])
        assert got.content == PNG
        with pytest.raises(NotFoundError):
            await mm.download_attachment(uploaded.episode_ids[0], user_id="someone-else")
