"""The mask-free copy of the MiniLM export: the same vectors as the model file, made once."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from memmachine.adapters.onnx.onnx_embedder import OnnxEmbedder
from memmachine.adapters.onnx.onnx_unmasked import UNMASKED_RECIPE, unmasked_model
from memmachine.errors import StoreError
from memmachine.ports import SpanSet

#: Texts of many token counts (the empty one, one over the 256-token limit), so the call
#: makes several batches and some texts share a batch.
TEXTS = [
    "I love green tea",
    "Green tea is my favourite drink",
    "Hey Mel! I went to a LGBTQ support group yesterday and it was so powerful.",
    "That's awesome, Caroline! What did you learn there? I'd love to hear more.",
    "We took the kids camping last weekend; they roasted marshmallows all night.",
    "My doctor said I should cut down on sugar before the marathon in May.",
    "",
    "the budget meeting moved to Paris " * 50,
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


def _cosines(a: list[list[float]], b: list[list[float]]) -> np.ndarray:
    left, right = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (left * right).sum(axis=1) / (
        np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)
    )


@pytest.mark.parametrize("quantize", ["none", "int8"])
async def test_vectors_equal_those_of_the_model_file(
    model_dir: Path, cache: Path, quantize: str
) -> None:
    fast = OnnxEmbedder(model_dir, cache_dir=cache, quantize=quantize)  # type: ignore[arg-type]
    plain = OnnxEmbedder(model_dir, cache_dir=cache, quantize=quantize, drop_mask=False)  # type: ignore[arg-type]
    fast.load()
    plain.load()
    loaded = fast._loaded
    assert loaded is not None
    assert loaded.unmasked
    assert plain._loaded is not None
    assert not plain._loaded.unmasked
    cosines = _cosines(await fast.embed(TEXTS), await plain.embed(TEXTS))
    assert cosines.min() > 1 - 1e-5, cosines
    # Pooled spans (the write path's own and sentence vectors) alike.
    text = "2023-05-08 Caroline: I went to a support group. It was so powerful!"
    spans: list[SpanSet] = [[(0, 10), (11, len(text))], [(0, 10), (31, 51)], [(0, 1)]]
    got = (await fast.embed_spans([text], [spans]))[0]
    want = (await plain.embed_spans([text], [spans]))[0]
    assert got[2] is None
    assert want[2] is None
    assert _cosines([v for v in got if v], [v for v in want if v]).min() > 1 - 1e-5
    await fast.close()
    await plain.close()


def test_the_copy_is_made_once_and_computes_no_mask(
    model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = model_dir / "onnx/model.onnx"
    with caplog.at_level(logging.INFO, logger="memmachine.adapters.onnx.onnx_unmasked"):
        made = unmasked_model(source, tmp_path)
        again = unmasked_model(source, tmp_path)
    assert made is not None
    assert again == made
    assert made.name == f"model.{UNMASKED_RECIPE}.onnx"
    assert caplog.text.count("wrote the mask-free copy") == 1
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".part")]
    graph = onnx.load(str(made)).graph
    ops = {node.op_type for node in graph.node}
    assert "IsNaN" not in ops
    assert "Where" not in ops
    assert not [node for node in graph.node if "attention_mask" in node.input]
    # The same feeds still work: the input stays declared.
    assert "attention_mask" in {i.name for i in graph.input}


def test_a_graph_that_needs_its_mask_is_used_as_it_is(tmp_path: Path) -> None:
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, None])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, None])
    graph = helper.make_graph(
        [helper.make_node("Cast", ["attention_mask"], ["out"], to=TensorProto.FLOAT)],
        "needs-mask",
        [mask],
        [out],
    )
    source = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph), str(source))
    assert unmasked_model(source, tmp_path / "cache") is None
    assert not list((tmp_path / "cache").rglob("*.onnx"))


async def test_an_unwritable_cache_falls_back_to_the_model_file(
    model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the cache dir should be")
    embedder = OnnxEmbedder(model_dir, cache_dir=blocked)
    with caplog.at_level(logging.WARNING, logger="memmachine.adapters.onnx.onnx_unmasked"):
        embedder.load()
    assert "could not be made" in caplog.text
    assert embedder._loaded is not None
    assert not embedder._loaded.unmasked
    assert len((await embedder.embed(["still embeds"]))[0]) == 384
    await embedder.close()


def test_a_padded_batch_is_refused_by_the_mask_free_graph(model_dir: Path, cache: Path) -> None:
    """Batches are never padded (one token count per batch); were one padded, the mask-free
    graph would attend to the padding, so it is an error rather than a wrong vector."""
    embedder = OnnxEmbedder(model_dir, cache_dir=cache)
    loaded = embedder._acquire()
    short, long = loaded.tokenizer.encode_batch(["tea", "green tea is my favourite drink"])
    with pytest.raises(StoreError, match="padded batch"):
        embedder._token_states(loaded, [short, long])
