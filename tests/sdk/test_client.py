"""The Python SDK against a live server: every call a user makes, sync and async."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from memmachine_sdk import (
    AsyncMemMachineClient,
    BadRequestError,
    ConflictError,
    MemMachineClient,
    MemMachineConnectionError,
    NotFoundError,
    UnauthorizedError,
)


def test_sync_client_round_trip(server_url: str) -> None:
    with MemMachineClient(server_url, api_key="sdk-key", user_id="sdk-sync") as mm:
        assert mm.health().status == "ok"
        added = mm.add(
            [
                "I water the ficus every Sunday",
                {"content": "The ficus is by the window", "role": "assistant"},
            ],
            session_id="plants",
        )
        assert len(added.episode_ids) == 2
        assert added.session_id == "plants"

        result = mm.search("ficus", top_k=5)
        assert {hit.content for hit in result.episodic} == {
            "I water the ficus every Sunday",
            "The ficus is by the window",
        }
        episode = mm.get_episode(added.episode_ids[0])
        assert episode.session_id == "plants"
        assert episode.role == "user"
        listed = mm.list_episodes(session_id="plants")
        assert listed.total == 2

        facts = mm.set_profile([{"tag": "home", "feature": "plant", "value": "ficus"}])
        assert facts[0].value == "ficus"
        assert [f.feature for f in mm.get_profile()] == ["plant"]
        assert mm.search_profile("ficus")[0].id == facts[0].id

        # the add above appended both messages in one write: version 1
        wm = mm.put_working("plants", state={"watered": True}, expected_version=1)
        assert wm.version == 2
        with pytest.raises(ConflictError) as conflict:
            mm.put_working("plants", state={"watered": False}, expected_version=1)
        assert conflict.value.current_version == 2
        appended = mm.append_working("plants", ["reminder set"])
        assert appended.message_count == 3
        assert [m.content for m in mm.get_working("plants", last_n=1).messages] == ["reminder set"]

        mm.delete_episode(added.episode_ids[1])
        with pytest.raises(NotFoundError):
            mm.get_episode(added.episode_ids[1])
        with pytest.raises(BadRequestError) as bad:
            mm.add([""], session_id="plants")
        assert bad.value.field == "messages.0.content"

        report = mm.forget_user("sdk-sync")
        assert (report.episodes_deleted, report.facts_deleted, report.sessions_deleted) == (1, 1, 1)
        assert mm.list_episodes().total == 0


async def test_async_client_round_trip(server_url: str) -> None:
    async with AsyncMemMachineClient(server_url, api_key="sdk-key") as mm:
        await mm.add(
            ["Quarterly review with Dana on Friday"], user_id="sdk-async", session_id="cal"
        )
        found = await mm.search("review Dana", user_id="sdk-async", types=["episodic"])
        assert [hit.content for hit in found.episodic] == ["Quarterly review with Dana on Friday"]
        assert found.working is None
        assert found.profile == []
        assert (await mm.get_working("cal", user_id="sdk-async")).message_count == 1
        report = await mm.forget_session("cal", user_id="sdk-async")
        assert report.episodes_deleted == 1
        assert (await mm.list_episodes(user_id="sdk-async")).total == 0
        await mm.set_profile([{"tag": "a", "feature": "b", "value": "c"}], user_id="sdk-async")
        assert await mm.delete_facts(user_id="sdk-async", tag="a") == 1


def test_client_errors_are_typed(server_url: str) -> None:
    with MemMachineClient(server_url, api_key="wrong") as mm, pytest.raises(UnauthorizedError):
        mm.search("x", user_id="u")
    with (
        MemMachineClient("http://127.0.0.1:9", timeout=2) as mm,
        pytest.raises(MemMachineConnectionError),
    ):
        mm.health()


def test_search_explains_and_switches_stages_off_for_one_call(server_url: str) -> None:
    with MemMachineClient(server_url, api_key="sdk-key", user_id="sdk-explain") as mm:
        mm.add(
            ["Ben booked the dentist for Thursday", "Remember to bring the insurance card"],
            session_id="errands",
        )
        explained = mm.search("dentist Thursday", top_k=1, types=["episodic"], explain=True)
        assert explained.explain is not None
        names = [stage.name for stage in explained.explain.stages]
        assert "candidates" in names
        assert "neighbourhood" in names
        [hit, *_] = explained.episodic
        assert hit.content == "Ben booked the dentist for Thursday"
        assert hit.explain is not None
        assert "lexical" in hit.explain.sources

        off = mm.search("dentist Thursday", types=["episodic"], stages_off=["neighbourhood"])
        assert off.explain is None
        assert all("neighbour" not in (found.ranks or {}) for found in off.episodic)
        with pytest.raises(BadRequestError) as bad:
            mm.search("dentist", stages_off=["ranking"])
        assert bad.value.field == "stages_off"

    async def explained_async() -> None:
        async with AsyncMemMachineClient(server_url, api_key="sdk-key") as amm:
            found = await amm.search("dentist", user_id="sdk-explain", explain=True)
            assert found.explain is not None
            assert all(hit.explain is not None for hit in found.episodic)

    asyncio.run(explained_async())


def test_an_add_repeated_with_its_key_is_answered_as_the_first_time_not_as_a_repeat(
    server_url: str,
) -> None:
    said = {"content": "Lease signed for the flat", "timestamp": "2024-08-01T09:00:00Z"}
    with MemMachineClient(server_url, api_key="sdk-key", user_id="sdk-keyed") as mm:
        first = mm.add([said], session_id="home", idempotency_key="lease-1")
        again = mm.add([said], session_id="home", idempotency_key="lease-1")
        assert again == first
        assert first.repeated_ids == []
        assert mm.list_episodes().total == 1


async def test_async_add_answers_repeated_ids_too(server_url: str) -> None:
    said = {"content": "Boiler serviced", "timestamp": "2024-08-02T09:00:00Z"}
    async with AsyncMemMachineClient(server_url, api_key="sdk-key", user_id="sdk-akeyed") as mm:
        first = await mm.add([said], session_id="home", idempotency_key="boiler-1")
        again = await mm.add([said], session_id="home", idempotency_key="boiler-1")
        assert again == first
        assert first.repeated_ids == []
        assert (await mm.list_episodes()).total == 1


class _NewerServer(httpx.HTTPTransport):
    """The network between the client and a server released after it: every JSON answer
    carries a field this SDK's models do not know, at the top and in each listed item."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if not response.headers.get("content-type", "").startswith("application/json"):
            return response
        response.read()
        body = _with_a_new_field(response.json())
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
        return httpx.Response(response.status_code, headers=headers, json=body)


def _with_a_new_field(body: Any) -> Any:
    if not isinstance(body, dict):
        return body
    more: dict[str, Any] = {"added_later": {"by": "a newer server"}}
    for name, value in body.items():
        if isinstance(value, list):
            value = [{**item, **more} if isinstance(item, dict) else item for item in value]
        more[name] = value
    return more


def test_a_client_reads_the_answers_of_a_server_newer_than_itself(server_url: str) -> None:
    """A server upgraded before its clients adds fields to its answers; the client reads
    what it knows and goes on, rather than failing every call."""
    said = {"content": "The cat is called Miso", "timestamp": "2024-08-03T09:00:00Z"}
    with (
        MemMachineClient(server_url, api_key="sdk-key", user_id="sdk-newer") as today,
        MemMachineClient(
            server_url, api_key="sdk-key", user_id="sdk-newer", transport=_NewerServer()
        ) as newer,
    ):
        added = newer.add([said], session_id="pets")
        assert added.episode_ids == [episode.id for episode in today.list_episodes().episodes]
        assert newer.search("what is the cat called").episodic == (
            today.search("what is the cat called").episodic
        )
        assert newer.list_episodes() == today.list_episodes()
        with pytest.raises(NotFoundError):  # errors still read as errors
            newer.get_episode("no-such-episode")
