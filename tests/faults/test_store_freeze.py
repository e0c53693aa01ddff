"""A store frozen (SIGSTOP) past the client's timeout while a write is in flight, then
resumed: the caller must be told the outcome is unknown, and the store must have been sent
the write exactly once, never again by a client retry behind the caller's back.

A loopback proxy between store client and server (:class:`~tests.faults.harness.WireTap`)
counts how often the write went out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memmachine.adapters.falkordb.falkordb_episode_store import FalkorDBEpisodeStore
from memmachine.adapters.redis.redis_working_memory_store import RedisWorkingMemoryStore
from memmachine.errors import MemMachineError, WriteOutcomeUnknownError
from memmachine.models import EpisodeRecord, Scope, WorkingMessage, utc_now
from memmachine.ports import Lifecycle
from tests.faults.conftest import Report
from tests.faults.harness import WireTap, frozen
from tests.services import RedisServer

#: The store client's timeout, and a freeze twice as long: a client retry would have time
#: to reconnect and resend before the server wakes up.
TIMEOUT_SECONDS = 2.0
FREEZE_SECONDS = 2 * TIMEOUT_SECONDS
#: Text the frozen write carries once (and nothing else carries).
MARKER = "written while the store was frozen"
SCOPE = Scope(tenant="freeze", user_id="ana", session_id="s1")


@dataclass(frozen=True)
class Case:
    """A store on ``url`` and one write of :data:`MARKER` to it, and how many copies of
    the marker the store holds."""

    name: str
    falkordb: bool
    make: Callable[[str], Lifecycle]
    write: Callable[[Lifecycle, str], Awaitable[object]]
    copies: Callable[[Lifecycle], Awaitable[int]]


def _episode(content: str) -> EpisodeRecord:
    return EpisodeRecord(
        id=content.replace(" ", "-"),
        role="user",
        producer=None,
        content=content,
        timestamp=utc_now(),
        search_text="terms",
    )


async def _add_episode(store: Lifecycle, content: str) -> object:
    assert isinstance(store, FalkorDBEpisodeStore)
    return await store.add_episodes(SCOPE, [_episode(content)])


async def _episodes_with_marker(store: Lifecycle) -> int:
    assert isinstance(store, FalkorDBEpisodeStore)
    return sum(e.content == MARKER for e in await store.list_episodes(SCOPE, limit=100))


async def _append_message(store: Lifecycle, content: str) -> object:
    assert isinstance(store, RedisWorkingMemoryStore)
    message = WorkingMessage(role="user", content=content, timestamp=utc_now())
    return await store.append(SCOPE, [message], ttl_seconds=None)


async def _messages_with_marker(store: Lifecycle) -> int:
    assert isinstance(store, RedisWorkingMemoryStore)
    memory = await store.get(SCOPE)
    return 0 if memory is None else sum(m.content == MARKER for m in memory.messages)


CASES = [
    Case(
        "FalkorDB episode store, add",
        True,
        lambda url: FalkorDBEpisodeStore(url, graph_name="freeze", timeout_seconds=TIMEOUT_SECONDS),
        _add_episode,
        _episodes_with_marker,
    ),
    Case(
        "Redis working store, append",
        False,
        lambda url: RedisWorkingMemoryStore(url, timeout_seconds=TIMEOUT_SECONDS),
        _append_message,
        _messages_with_marker,
    ),
]


@pytest.fixture(params=CASES, ids=[case.name for case in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    found: Case = request.param
    return found


@pytest.fixture
def server(case: Case, tmp_path: Path) -> Iterator[RedisServer]:
    """A server of this test's own: freezing it stops nothing else."""
    server = RedisServer(tmp_path / "server", falkordb=case.falkordb)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


async def test_a_write_frozen_past_the_timeout_is_sent_once_and_reported_unknown(
    case: Case, server: RedisServer, tally: Report
) -> None:
    with WireTap(server.port) as tap:
        store = case.make(f"redis://127.0.0.1:{tap.port}")
        await store.start()
        try:
            await case.write(store, "written before the freeze")
            with frozen(server.process.pid):
                # The write reaches the frozen server's socket and waits there.
                write = asyncio.create_task(case.write(store, MARKER))
                await asyncio.sleep(FREEZE_SECONDS)
            outcome: MemMachineError | None = None
            try:
                await write
            except MemMachineError as exc:
                outcome = exc
            copies = await case.copies(store)
        finally:
            await store.close()
        sent = tap.count(MARKER)
    tally(
        case=f"store frozen during a write: {case.name}",
        acknowledged=int(outcome is None),
        stored=min(copies, 1),
        lost=int(outcome is None and copies == 0),
        duplicated=max(0, copies - 1),
        unknown=int(isinstance(outcome, WriteOutcomeUnknownError)),
        sent=sent,
    )
    assert sent == 1, f"the write was sent {sent} times"
    assert isinstance(outcome, WriteOutcomeUnknownError), repr(outcome)
    assert outcome.code == "write_outcome_unknown"
    assert copies == 1  # it did happen: the caller was right not to assume otherwise
