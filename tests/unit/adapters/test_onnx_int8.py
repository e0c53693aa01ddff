"""The int8 copy of the MiniLM export: made once into the cache, faithful to the float model."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from memmachine.adapters.onnx.onnx_embedder import OnnxEmbedder
from memmachine.adapters.onnx.onnx_quantization import INT8_RECIPE, int8_model
from memmachine.errors import ConfigurationError

TURNS = [
    "I love green tea",
    "Green tea is my favourite drink",
    "The car is red",
    "Hey Mel! I went to a LGBTQ support group yesterday and it was so powerful.",
    "That's awesome, Caroline! What did you learn there? I'd love to hear more.",
    "I'm thinking of going into counseling, helping people who went through the same thing.",
    "We took the kids camping last weekend; they roasted marshmallows all night.",
    "My doctor said I should cut down on sugar before the marathon in May.",
    "",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="module")
def int8(model_dir: Path, cache: Path) -> OnnxEmbedder:
    embedder = OnnxEmbedder(model_dir, quantize="int8", cache_dir=cache)
    embedder.load()
    return embedder


def _matrix(vectors: list[list[float]]) -> np.ndarray:
    return np.asarray(vectors, dtype=np.float64)


async def test_int8_vectors_stay_close_to_the_float_model(
    model_dir: Path, int8: OnnxEmbedder
) -> None:
    fp32 = OnnxEmbedder(model_dir)
    exact, quantised = _matrix(await fp32.embed(TURNS)), _matrix(await int8.embed(TURNS))
    assert quantised.shape == (len(TURNS), 384)
    np.testing.assert_allclose(np.linalg.norm(quantised, axis=1), 1.0, atol=1e-5)
    cosines = (exact * quantised).sum(axis=1)
    assert cosines.min() > 0.96, cosines
    assert cosines.mean() > 0.98, cosines
    # The model card's similarities survive quantisation.
    assert float(quantised[0] @ quantised[1]) == pytest.approx(0.907, abs=0.02)
    assert float(quantised[0] @ quantised[2]) == pytest.approx(0.061, abs=0.04)
    await fp32.close()


async def test_batch_neighbours_barely_move_an_int8_vector(int8: OnnxEmbedder) -> None:
    """Activations are quantised per batch, so a text's batch mates shift it a little (the
    empty text, all special tokens, the most)."""
    together = _matrix(await int8.embed(TURNS))
    alone = _matrix([(await int8.embed([text]))[0] for text in TURNS])
    cosines = (together * alone).sum(axis=1)
    assert cosines[:-1].min() > 0.98, cosines
    assert cosines[-1] > 0.95, cosines


def test_the_copy_is_made_once_into_the_cache(
    model_dir: Path, cache: Path, int8: OnnxEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    made = sorted((cache / "int8").rglob("*.onnx"))
    assert len(made) == 1
    assert made[0].name == f"model.{INT8_RECIPE}.onnx"
    assert made[0].stat().st_size < (model_dir / "onnx/model.onnx").stat().st_size
    assert not [p for p in cache.rglob("*") if p.name.endswith(".part")]
    with caplog.at_level(logging.INFO, logger="memmachine.adapters.onnx.onnx_quantization"):
        again = OnnxEmbedder(model_dir, quantize="int8", cache_dir=cache)
        again.load()
    assert sorted((cache / "int8").rglob("*.onnx")) == made
    assert not any("quantised" in r.getMessage() for r in caplog.records)


def test_the_variant_is_part_of_the_model_name(model_dir: Path, int8: OnnxEmbedder) -> None:
    assert int8.model == "all-MiniLM-L6-v2 [int8]"
    assert OnnxEmbedder(model_dir).model == "all-MiniLM-L6-v2"
    assert (
        OnnxEmbedder(model_dir, onnx_file="onnx/model_qint8.onnx", model_name="x/y").model
        == "x/y [onnx/model_qint8.onnx]"
    )


def test_an_already_quantised_file_is_refused(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="already quantised"):
        int8_model(model_dir / "onnx/model_qint8.onnx", tmp_path)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_an_unwritable_cache_is_a_configuration_error(model_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache should be")
    embedder = OnnxEmbedder(model_dir, quantize="int8", cache_dir=blocker)
    with pytest.raises(ConfigurationError, match="MEMMACHINE_EMBEDDING_CACHE_DIR"):
        embedder.load()
    assert not embedder.loaded


def test_unknown_quantize_value_is_refused(model_dir: Path) -> None:
    with pytest.raises(ConfigurationError, match="quantize"):
        OnnxEmbedder(model_dir, quantize="int4")  # type: ignore[arg-type]
