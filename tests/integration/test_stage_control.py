"""A search's stages, controlled and explained for one search (``StageControl``), on the real
embedded stores: a stage added to the pipeline is timed, can be switched off by name and shows
up in each hit's steps with no code of its own for it; an essential stage cannot be skipped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memmachine import Scope, open_manager
from memmachine.config import EmbeddingSettings, RetrievalSettings, Settings
from memmachine.errors import InvalidInputError
from memmachine.manager import MemoryManager
from memmachine.models import NewMessage
from memmachine.retrieval.explain import StageControl
from memmachine.retrieval.pipeline import Search, SearchPipeline
from memmachine.retrieval.stages import STAGES

USER = Scope(user_id="u")


class PinStage:
    """A stage written after the explanation was: lifts hits marked ``pinned`` to the top
    and gives them a rank of their own, ``pinned``."""

    name = "pin"

    def applies(self, search: Search) -> bool:
        return bool(search.scores)

    async def run(self, search: Search) -> None:
        top = max(search.scores.values())
        for key, episode in search.by_id.items():
            if key in search.scores and episode.metadata.get("pinned"):
                search.scores[key] = top * 2
                search.ranks[key]["pinned"] = 1


def pipeline() -> SearchPipeline:
    stages = [stage() for stage in STAGES]
    at = [stage.name for stage in stages].index("ranking")
    return SearchPipeline([*stages[:at], PinStage(), *stages[at:]])


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[MemoryManager]:
    settings = Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(provider="none"),
        retrieval=RetrievalSettings(speaker_boost=0.0, neighbour_weight=0.0),
    )
    async with open_manager(settings) as manager:
        manager.episodic_service.pipeline = pipeline()
        messages = [
            NewMessage(content="the garden needs water on Sunday", producer="Ana"),
            NewMessage(content="water the garden, water the roses, water everything"),
            NewMessage(content="garden water schedule", metadata={"pinned": True}),
        ]
        await manager.add_messages(Scope(user_id="u", session_id="s"), messages, working=False)
        yield manager


async def test_a_new_stage_is_timed_attributed_and_can_be_switched_off(
    memory: MemoryManager,
) -> None:
    control = StageControl(explain=True)
    hits = await memory.search_episodes(USER, "water the garden", top_k=3, stages=control)
    assert hits[0].episode.metadata.get("pinned") is True
    [pin] = [run for run in control.runs if run.name == "pin"]
    assert pin.ran
    assert pin.switchable
    trace = control.hits[hits[0].episode.id]
    assert "pinned" in trace.sources
    assert "lexical" in trace.sources
    [step] = [step for step in trace.steps if step.stage == "pin"]
    assert step.rank_before is not None
    assert step.rank_before > 1
    assert step.rank_after == 1

    off = StageControl(["pin"], explain=True)
    plain = await memory.search_episodes(USER, "water the garden", top_k=3, stages=off)
    assert plain[0].episode.metadata.get("pinned") is None
    assert next(run for run in off.runs if run.name == "pin").switched_off
    assert all(step.stage != "pin" for trace in off.hits.values() for step in trace.steps)


async def test_essential_and_unknown_stages_are_refused_before_searching(
    memory: MemoryManager,
) -> None:
    for name, why in [("ranking", "essential"), ("pine", "not a stage")]:
        with pytest.raises(InvalidInputError) as refused:
            await memory.search(USER, "garden", stages=StageControl([name]))
        assert refused.value.field == "stages_off"
        assert why in str(refused.value)
        assert "pin" in str(refused.value)  # the new stage is among those that can be


async def test_without_explain_nothing_is_recorded(memory: MemoryManager) -> None:
    control = StageControl(["pin"])
    await memory.search_episodes(USER, "garden", stages=control)
    assert control.runs == []
    assert control.hits == {}
