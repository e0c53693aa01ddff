"""Done-when of the SDK: a real ``memmachine serve`` process, and a scripted session through
``Client`` and ``AsyncClient`` configured only from the environment (MEMMACHINE_URL,
MEMMACHINE_API_KEY), the way a user's application would be."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from memmachine_sdk import (
    AsyncClient,
    Client,
    ConflictError,
    MemMachineConnectionError,
    UnauthorizedError,
)
from tests.live import LiveServer, clean_environment, serve

API_KEY = "live-sdk-key"


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from /proc (Linux)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("live")
    env = clean_environment(
        MEMMACHINE_DATA_DIR=str(tmp / "data"),
        MEMMACHINE_EMBEDDING_PROVIDER="local",
        MEMMACHINE_EMBEDDING_MODEL=str(model_dir),
        MEMMACHINE_API_KEYS=f"{API_KEY}=live-tenant",
    )
    with serve(tmp, env) as server:
        yield server


@pytest.fixture
def sdk_env(live: LiveServer, monkeypatch: pytest.MonkeyPatch) -> LiveServer:
    monkeypatch.setenv("MEMMACHINE_URL", live.url)
    monkeypatch.setenv("MEMMACHINE_API_KEY", API_KEY)
    return live


def test_sync_session_against_a_live_server(sdk_env: LiveServer) -> None:
    with Client() as mm:  # URL and key from the environment
        assert mm.base_url == sdk_env.url
        health = mm.health()
        assert (health.status, health.mode) == ("ok", "hybrid")

        chat = mm.memory(user_id="live-ana", session_id="vet", agent_id="assistant")
        chat.add(
            [
                "My beagle Toast has a vet appointment on Thursday",
                {"role": "assistant", "content": "I will remind you on Wednesday evening"},
            ]
        )
        found = chat.search("when does the dog see the vet?", top_k=3)
        assert found.episodic[0].content == "My beagle Toast has a vet appointment on Thursday"

        chat.profile.set({"tag": "pets", "feature": "dog", "value": "beagle named Toast"})
        assert [fact.value for fact in chat.profile.get(tag="pets")] == ["beagle named Toast"]
        assert chat.profile.search("what pet")[0].feature == "dog"

        state = chat.state.set({"reminder": "Wednesday 19:00"}, expected_version=1)
        assert state.version == 2
        with pytest.raises(ConflictError) as stale:
            chat.state.set({"reminder": "never"}, expected_version=1)
        assert stale.value.current_version == 2
        assert chat.state.get().value == {"reminder": "Wednesday 19:00"}

        prompt = chat.prompt("What is my dog called?", max_tokens=1000)
        assert "beagle named Toast" in prompt.system
        assert prompt.messages[-1] == {"role": "user", "content": "What is my dog called?"}

        report = chat.forget()
        assert (report.episodes_deleted, report.sessions_deleted, report.facts_deleted) == (
            2,
            1,
            1,
        )
        assert chat.search("vet appointment").episodic == []


async def test_async_session_against_a_live_server(sdk_env: LiveServer) -> None:
    async with AsyncClient(user_id="live-ben") as mm:
        chat = mm.memory(session_id="garden")
        await chat.add("The tomatoes go in the south bed this year")
        found = await chat.search("where do the tomatoes go?", types=["episodic"])
        assert [hit.content for hit in found.episodic] == [
            "The tomatoes go in the south bed this year"
        ]
        await chat.profile.set({"tag": "garden", "feature": "crop", "value": "tomatoes"})
        await chat.state.set({"watered": True})
        assert (await chat.state.get()).value == {"watered": True}
        prompt = await chat.prompt("What am I growing?", format="gemini")
        assert "tomatoes" in prompt.system

        user = mm.memory()  # the client's user: forget() removes everything of theirs
        report = await user.forget()
        assert (report.episodes_deleted, report.facts_deleted, report.sessions_deleted) == (1, 1, 1)
        assert (await user.episodes()).total == 0


def test_wrong_key_is_refused(sdk_env: LiveServer) -> None:
    with Client(api_key="not-a-key") as mm, pytest.raises(UnauthorizedError) as err:
        mm.memory(user_id="live-ana").search("anything")
    assert err.value.status == 401


def test_stopping_the_server_leaves_no_process_behind(live: LiveServer) -> None:
    # runs last in this module: it stops the shared server
    children = descendants(live.process.pid)
    assert children  # the embedded FalkorDB runs as a child of the server
    live.process.send_signal(signal.SIGTERM)
    live.process.wait(timeout=60)
    assert live.process.returncode in (0, -signal.SIGTERM), live.log.read_text()[-2000:]
    assert not [pid for pid in children if alive(pid)], live.log.read_text()[-2000:]
    with (
        Client(live.url, api_key=API_KEY, max_retries=1) as mm,
        pytest.raises(MemMachineConnectionError) as err,
    ):
        mm.health()
    assert err.value.request_sent is False
