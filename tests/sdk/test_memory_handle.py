"""The scoped handle (``client.memory(user_id=..., session_id=...)``) against the real app
in-process: the sync client through Starlette's TestClient, the async one through httpx's
ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from memmachine_sdk import AsyncClient, Client, ConflictError, NotFoundError, SessionState
from memmachine_server.app import create_app
from tests.server.conftest import LOCAL, make_settings


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    app = create_app(make_settings(tmp_path_factory.mktemp("handle")))
    with TestClient(app, raise_server_exceptions=False, base_url=LOCAL) as client:
        yield client  # an httpx.Client whose requests go to the app


@asynccontextmanager
async def in_process(data_dir: Path) -> AsyncIterator[AsyncClient]:
    """An AsyncClient on a started app. Entered and left in the test's own task: the app's
    lifespan holds task-bound scopes."""
    app = create_app(make_settings(data_dir))
    async with app.router.lifespan_context(app):  # start the stores like a server would
        transport = httpx.ASGITransport(app=app)
        async with AsyncClient(LOCAL, transport=transport) as client:
            yield client


def test_scoped_handle_round_trip(http: Any) -> None:
    with Client(http_client=http, user_id="handle-sync") as mm:
        chat = mm.memory(session_id="trip")
        added = chat.add(
            [
                "I am flying to Oslo on May 3rd",
                {"role": "assistant", "content": "Noted: Oslo on May 3rd"},
            ]
        )
        assert added.session_id == "trip"
        assert len(added.episode_ids) == 2
        chat.add("Please book me a window seat")  # one message as plain text

        found = chat.search("flight to Oslo", top_k=5)
        assert "I am flying to Oslo on May 3rd" in [hit.content for hit in found.episodic]
        assert found.working is not None
        assert found.working.message_count == 3
        assert chat.episodes().total == 3
        # the handle is the scope: another user's handle sees none of it
        assert mm.memory(user_id="handle-other", session_id="trip").search("Oslo").episodic == []

        chat.profile.set({"tag": "travel", "feature": "seat", "value": "window"})
        chat.profile.set([{"tag": "travel", "feature": "seat", "value": "aisle"}])
        assert [fact.value for fact in chat.profile.get(tag="travel")] == ["aisle"]
        assert chat.profile.search("seat preference")[0].value == "aisle"
        history = chat.profile.history("travel", "seat")
        assert [version.value for version in history.history] == ["window"]

        # two adds wrote working memory twice: version 2
        assert chat.state.get() == SessionState(
            value={}, version=2, updated_at=chat.state.get().updated_at
        )
        saved = chat.state.set({"step": "booking", "seat": "aisle"}, expected_version=2)
        assert saved.version == 3
        with pytest.raises(ConflictError) as stale:
            chat.state.set({"step": "lost update"}, expected_version=2)
        assert stale.value.current_version == 3
        now = chat.state.get()
        assert (now.value, now.version) == ({"step": "booking", "seat": "aisle"}, 3)
        # setting the state keeps the conversation
        assert mm.get_working("trip").message_count == 3

        prompt = chat.prompt("Which seat should I book?", max_tokens=800)
        assert "aisle" in prompt.system
        assert prompt.messages[-1]["content"] == "Which seat should I book?"
        assert prompt.token_count <= 800

        report = chat.forget()
        # the session's episodes, its working memory and the fact set within it
        assert (report.episodes_deleted, report.sessions_deleted, report.facts_deleted) == (
            3,
            1,
            1,
        )
        assert chat.episodes().total == 0
        assert chat.state.get().version == 0
        assert chat.search("Oslo").episodic == []


def test_user_handle_forgets_the_whole_user(http: Any) -> None:
    with Client(http_client=http) as mm:
        user = mm.memory(user_id="handle-forget")
        for session in ("a", "b"):
            mm.memory(user_id="handle-forget", session_id=session).add(f"note in {session}")
        user.profile.set({"tag": "t", "feature": "f", "value": "v"})
        assert user.episodes().total == 2
        report = user.forget()
        assert (report.episodes_deleted, report.facts_deleted, report.sessions_deleted) == (2, 1, 2)
        assert user.episodes().total == 0
        assert user.profile.get() == []


def test_handle_carries_agent_and_odd_session_ids(http: Any) -> None:
    with Client(http_client=http, user_id="handle-ids") as mm:
        # '#' and '|' are valid id characters; they must survive the URL path
        planner = mm.memory(session_id="sprint#12|a", agent_id="planner")
        planner.add("Ship the export feature")
        planner.state.set({"sprint": 12})
        assert planner.state.get().value == {"sprint": 12}
        [episode] = planner.episodes().episodes
        assert (episode.session_id, episode.agent_id) == ("sprint#12|a", "planner")
        fact = planner.profile.set({"tag": "work", "feature": "team", "value": "data"})[0]
        planner.profile.delete_fact(fact.id)
        with pytest.raises(NotFoundError):
            planner.profile.delete_fact(fact.id)
        assert planner.profile.delete() == 0
        assert planner.forget().episodes_deleted == 1


async def test_async_scoped_handle_round_trip(tmp_path: Path) -> None:
    async with in_process(tmp_path / "data") as client:
        await async_round_trip(client)


async def async_round_trip(client: AsyncClient) -> None:
    chat = client.memory(user_id="handle-async", session_id="cooking")
    await chat.add(["My sourdough starter is called Bubbles", "Feed it every morning"])
    found = await chat.search("sourdough starter name", types=["episodic"])
    assert found.episodic[0].content == "My sourdough starter is called Bubbles"

    [fact] = await chat.profile.set({"tag": "kitchen", "feature": "starter", "value": "Bubbles"})
    assert [f.id for f in await chat.profile.get()] == [fact.id]
    assert (await chat.profile.search("starter"))[0].value == "Bubbles"
    assert (await chat.profile.history("kitchen", "starter")).current is not None

    state = await chat.state.get()
    assert (state.value, state.version) == ({}, 1)
    state = await chat.state.set({"hydration": 0.75}, expected_version=state.version)
    with pytest.raises(ConflictError):
        await chat.state.set({"hydration": 0.6}, expected_version=1)
    assert (await chat.state.get()).value == {"hydration": 0.75}

    prompt = await chat.prompt("What is my starter called?", format="anthropic")
    assert prompt.format == "anthropic"
    assert "Bubbles" in prompt.system

    assert await chat.profile.delete(tag="kitchen") == 1
    report = await chat.forget()
    assert (report.episodes_deleted, report.sessions_deleted) == (2, 1)
    assert (await chat.episodes()).total == 0
