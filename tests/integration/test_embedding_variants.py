"""A data dir embedded with one variant of the model refuses to open with another."""

from __future__ import annotations

from pathlib import Path

import pytest

from memmachine import Scope, open_manager
from memmachine.config import EmbeddingSettings, Settings
from memmachine.errors import ConfigurationError
from memmachine.models import NewMessage


def _settings(data_dir: Path, model_dir: Path, cache: Path, **embedding: object) -> Settings:
    return Settings(
        data_dir=data_dir,
        embedding=EmbeddingSettings(
            provider="local",
            model=str(model_dir),
            cache_dir=cache,
            **embedding,  # type: ignore[arg-type]
        ),
    )


async def test_int8_and_float_vectors_are_never_mixed(model_dir: Path, tmp_path: Path) -> None:
    data, cache = tmp_path / "data", tmp_path / "cache"
    scope = Scope(user_id="ana", session_id="s1")
    async with open_manager(_settings(data, model_dir, cache)) as manager:
        await manager.add_messages(
            scope, [NewMessage(content="I adopted a beagle called Toast")], working=False
        )

    with pytest.raises(ConfigurationError) as info:
        async with open_manager(_settings(data, model_dir, cache, quantize="int8")):
            pytest.fail("opened float vectors with the int8 model")
    message = info.value.message
    assert "all-MiniLM-L6-v2 [int8]" in message
    assert "vectors from all-MiniLM-L6-v2;" in message

    # The same settings as before still open it and find the episode by meaning.
    async with open_manager(_settings(data, model_dir, cache)) as manager:
        hits = await manager.search_episodes(scope, "my dog")
        assert [hit.episode.content for hit in hits] == ["I adopted a beagle called Toast"]
        assert "vector" in hits[0].ranks
