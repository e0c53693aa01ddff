"""OnnxEmbedder against the shared all-MiniLM-L6-v2 export (skipped when it is absent)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from memmachine.adapters.onnx.onnx_embedder import (
    OnnxEmbedder,
    QueryCacheInfo,
    available_cpus,
    deal_batches,
    device_line,
    equal_length_batches,
)
from memmachine.errors import ConfigurationError, InvalidInputError, StoreError
from memmachine.ports import Embedder, SpanEmbedder


@pytest.fixture(scope="module")
def embedder(model_dir: Path) -> OnnxEmbedder:
    emb = OnnxEmbedder(model_dir)
    emb.load()
    return emb


def _cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


def _texts(n: int) -> list[str]:
    """Texts of very different lengths (including empty and over-long ones), in no order."""
    rng = np.random.default_rng(7)
    words = ["tea", "car", "memory", "agent", "red", "green", "Paris", "doctor", "budget"]
    out = []
    for i in range(n):
        length = {0: 0, 33: 120}.get(i, int(rng.integers(1, 40)))
        out.append(" ".join(rng.choice(words, size=length)))
    rng.shuffle(out)
    return out


def test_construction_is_cheap_and_lazy(model_dir: Path) -> None:
    emb = OnnxEmbedder(model_dir, model_name="minilm")
    assert not emb.loaded
    assert emb.dimensions == 0
    assert emb.model == "minilm"
    assert emb.name == "embedder"
    assert OnnxEmbedder(model_dir).model == model_dir.name


def test_satisfies_the_port(embedder: OnnxEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.dimensions == 384


async def test_shapes_and_unit_norm(embedder: OnnxEmbedder) -> None:
    vectors = await embedder.embed(["hello world", "", "a" * 5000, "Ünïcödé ✓ 東京"])
    assert len(vectors) == 4
    for vector in vectors:
        assert len(vector) == 384
        assert all(isinstance(x, float) for x in vector)
        assert abs(np.linalg.norm(vector) - 1.0) < 1e-5
    assert await embedder.embed([]) == []


async def test_sanity_values_from_the_model_readme(embedder: OnnxEmbedder) -> None:
    tea, fav, car = await embedder.embed(
        ["I love green tea", "Green tea is my favourite drink", "The car is red"]
    )
    assert _cos(tea, fav) == pytest.approx(0.907, abs=0.01)
    assert _cos(tea, car) == pytest.approx(0.061, abs=0.02)


async def test_batching_and_sorting_do_not_change_results(model_dir: Path) -> None:
    embedder = OnnxEmbedder(model_dir, batch_size=16)  # 70 texts = 4 full batches + 6
    texts = _texts(70)
    together = np.array(await embedder.embed(texts))
    alone = np.array([(await embedder.embed([text]))[0] for text in texts])
    assert together.shape == (70, 384)
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_batches_hold_texts_of_one_length_so_nothing_is_padded() -> None:
    lengths = [5, 9, 5, 7, 9, 9, 5, 12, 5]
    batches = equal_length_batches(lengths, 3)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        assert len({lengths[i] for i in batch}) == 1  # one width: no padding
        assert len(batch) <= 3
    # Longest first; same-length texts share a batch up to the size limit.
    assert batches == [[7], [1, 4, 5], [3], [0, 2, 6], [8]]
    assert equal_length_batches([], 4) == []


def test_batches_are_dealt_to_the_workers_by_their_tokens() -> None:
    lengths = [40, 30, 30, 10, 10, 10, 10]
    batches = equal_length_batches(lengths, 4)
    shares = deal_batches(batches, lengths, 2)
    assert [[lengths[b[0]] * len(b) for b in share] for share in shares] == [[40, 40], [60]]
    assert deal_batches(batches[:1], lengths, 4) == [[[0]]]  # never an idle empty share


async def test_a_text_gets_the_same_vector_whatever_its_batch_mates(model_dir: Path) -> None:
    """Unpadded batches give each text exactly its vector alone, as padded ones did within
    float rounding: windows and sentences pooled from them are unchanged too."""
    embedder = OnnxEmbedder(model_dir, batch_size=8)
    texts = ["red car", "blue car", "a green doctor", "the budget", *filter(None, _texts(20))]
    together = np.array(await embedder.embed(texts))
    alone = np.array([(await embedder.embed([text]))[0] for text in texts])
    np.testing.assert_allclose(together, alone, atol=1e-6)
    spans = [[[(0, len(text))]] for text in texts]
    pooled = await embedder.embed_spans(texts, spans)
    for text, (vector,) in zip(texts, pooled, strict=True):
        (single,) = (await embedder.embed_spans([text], [[[(0, len(text))]]]))[0]
        assert vector is not None
        assert single is not None
        np.testing.assert_allclose(vector, single, atol=1e-6)


async def test_order_is_preserved(model_dir: Path, embedder: OnnxEmbedder) -> None:
    small_batches = OnnxEmbedder(model_dir, batch_size=3)
    texts = _texts(25)
    forward = np.array(await small_batches.embed(texts))
    backward = np.array(await small_batches.embed(texts[::-1]))
    np.testing.assert_allclose(forward, backward[::-1], atol=1e-5)
    np.testing.assert_allclose(forward, np.array(await embedder.embed(texts)), atol=1e-5)
    # Each vector belongs to its own text: identical texts get identical vectors, distinct
    # texts do not.
    again = await small_batches.embed(["zebra crossing", "quantum physics", "zebra crossing"])
    assert _cos(again[0], again[2]) == pytest.approx(1.0, abs=1e-6)
    assert _cos(again[0], again[1]) < 0.9


async def test_truncation_at_max_tokens(model_dir: Path) -> None:
    short = OnnxEmbedder(model_dir, max_tokens=8)
    base = "alpha beta gamma delta epsilon zeta"
    first, second = await short.embed([base + " one two three", base + " four five six"])
    # Only the first 6 tokens (+ [CLS]/[SEP]) count, so the different tails are cut off.
    assert _cos(first, second) == pytest.approx(1.0, abs=1e-6)


async def test_qint8_file_loads(model_dir: Path, embedder: OnnxEmbedder) -> None:
    quantised = OnnxEmbedder(model_dir, onnx_file="onnx/model_qint8.onnx", threads=1)
    await quantised.start()
    assert quantised.dimensions == 384
    texts = ["I love green tea", "The car is red", "Meeting with the doctor on Monday"]
    q = await quantised.embed(texts)
    f = await embedder.embed(texts)
    for qv, fv in zip(q, f, strict=True):
        assert abs(np.linalg.norm(qv) - 1.0) < 1e-5
        assert _cos(qv, fv) > 0.85
    await quantised.close()


def test_missing_model_dir_is_a_configuration_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigurationError, match=str(missing)):
        OnnxEmbedder(missing).load()


async def test_missing_files_and_bad_onnx(tmp_path: Path, model_dir: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"tokenizer\.json"):
        await OnnxEmbedder(tmp_path).start()
    shutil.copy(model_dir / "tokenizer.json", tmp_path / "tokenizer.json")
    with pytest.raises(ConfigurationError, match=r"model\.onnx"):
        OnnxEmbedder(tmp_path).load()
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "model.onnx").write_bytes(b"this is not a protobuf")
    with pytest.raises(ConfigurationError, match=r"cannot load ONNX model .*model\.onnx"):
        OnnxEmbedder(tmp_path).load()
    # Lazily loading from embed() reports the same problem as a store failure.
    with pytest.raises(StoreError, match="cannot load ONNX model") as info:
        await OnnxEmbedder(tmp_path).embed(["x"])
    assert info.value.store == "embedder"


async def test_close_and_restart(model_dir: Path) -> None:
    emb = OnnxEmbedder(model_dir, onnx_file="onnx/model_qint8.onnx")
    assert len((await emb.embed(["lazy load"]))[0]) == 384  # loads on first use
    await emb.close()
    await emb.close()
    with pytest.raises(StoreError, match="closed"):
        await emb.embed(["x"])
    await emb.start()
    assert len(await emb.embed(["back"])) == 1


async def test_a_single_string_is_refused(embedder: OnnxEmbedder) -> None:
    with pytest.raises(InvalidInputError):
        await embedder.embed("not a list")


async def test_event_loop_keeps_running_during_a_big_embed(model_dir: Path) -> None:
    emb = OnnxEmbedder(model_dir, onnx_file="onnx/model_qint8.onnx", batch_size=32)
    emb.load()
    texts = [
        f"turn {i}: " + "we talked about the budget and the trip to Paris " * 3 for i in range(300)
    ]
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.002)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    started = time.perf_counter()
    vectors = await emb.embed(texts)
    elapsed = time.perf_counter() - started
    stop.set()
    await task
    assert len(vectors) == 300
    assert len(gaps) >= 10, f"ticker ran {len(gaps)} times in {elapsed:.2f}s"
    # A blocking embed would stall the loop for the whole call (the ticker would not run at
    # all); batches in a worker thread leave it free apart from short hand-overs.
    assert max(gaps) < elapsed / 2, f"max gap {max(gaps):.3f}s in {elapsed:.2f}s"


async def test_parallel_batches_give_the_same_vectors(model_dir: Path) -> None:
    texts = _texts(37)
    one = OnnxEmbedder(model_dir, batch_size=4, workers=1)
    three = OnnxEmbedder(model_dir, batch_size=4, workers=3)
    assert (one.workers, one.threads) == (1, available_cpus())
    assert (three.workers, three.threads) == (3, max(1, available_cpus() // 3))
    np.testing.assert_allclose(
        np.array(await three.embed(texts)), np.array(await one.embed(texts)), atol=1e-5
    )
    # A small call is spread over the workers too, and keeps its order.
    few = texts[:5]
    np.testing.assert_allclose(
        np.array(await three.embed(few)), np.array(await one.embed(few)), atol=1e-5
    )


def test_automatic_workers_use_every_cpu_single_threaded(model_dir: Path) -> None:
    emb = OnnxEmbedder(model_dir)
    assert (emb.workers, emb.threads) == (available_cpus(), 1)
    assert OnnxEmbedder(model_dir, workers=1, threads=3).threads == 3
    with pytest.raises(ConfigurationError, match="workers"):
        OnnxEmbedder(model_dir, workers=-1)


async def test_repeated_queries_come_from_a_bounded_cache(model_dir: Path) -> None:
    emb = OnnxEmbedder(model_dir, query_cache_size=2)
    first = await emb.embed(["where did Ana move?"])
    first[0][0] = 42.0  # the caller's copy; the cache keeps its own
    again = await emb.embed(["where did Ana move?"])
    assert again[0][0] != 42.0
    np.testing.assert_allclose(again, await OnnxEmbedder(model_dir).embed(["where did Ana move?"]))
    assert emb.query_cache_info() == QueryCacheInfo(hits=1, misses=1, maxsize=2, currsize=1)

    await emb.embed(["q two"])
    await emb.embed(["q three"])  # evicts the least recently used: the first query
    await emb.embed(["where did Ana move?"])
    assert emb.query_cache_info() == QueryCacheInfo(hits=1, misses=4, maxsize=2, currsize=2)
    # Calls with several texts (ingestion) neither use nor fill it.
    await emb.embed(["q two", "q four"])
    assert emb.query_cache_info() == QueryCacheInfo(hits=1, misses=4, maxsize=2, currsize=2)
    await emb.close()
    assert emb.query_cache_info().currsize == 0

    off = OnnxEmbedder(model_dir, query_cache_size=0)
    await off.embed(["x"])
    await off.embed(["x"])
    assert off.query_cache_info() == QueryCacheInfo(hits=0, misses=0, maxsize=0, currsize=0)


# -- pooling spans from one run ------------------------------------------------------------


def test_it_pools_spans(embedder: OnnxEmbedder) -> None:
    assert isinstance(embedder, SpanEmbedder)
    assert embedder.pools_spans
    assert embedder.max_tokens == 256


async def test_a_span_over_the_whole_text_is_the_texts_vector(embedder: OnnxEmbedder) -> None:
    texts = ["2 May 2023 Ann: I adopted a beagle called Toast. He loves the park!", "tea"]
    plain = await embedder.embed(texts)
    pooled = await embedder.embed_spans(texts, [[[(0, len(texts[0]))]], [[(0, 3)]]])
    assert [len(sets) for sets in pooled] == [1, 1]
    for vector, (whole,) in zip(plain, pooled, strict=True):
        assert whole is not None
        assert _cos(vector, whole) == pytest.approx(1.0, abs=1e-5)


async def test_each_span_set_gets_its_own_unit_vector(embedder: OnnxEmbedder) -> None:
    text = "2 May 2023 Ann: I adopted a beagle called Toast. We booked a flight to Lisbon."
    dog, trip = text.index("I adopted"), text.index("We booked")
    sets = [[(0, 10), (dog, trip)], [(0, 10), (trip, len(text))], [(500, 600)]]
    ((beagle, lisbon, nothing),) = await embedder.embed_spans([text], [sets])
    assert nothing is None  # no token of its own: not a vector of the special tokens alone
    assert beagle is not None
    assert lisbon is not None
    for vector in (beagle, lisbon):
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    queries = await embedder.embed(["what dog did Ann adopt?", "where is Ann flying?"])
    # each sentence's vector is nearer its own question than the other sentence's is
    assert _cos(queries[0], beagle) > _cos(queries[0], lisbon)
    assert _cos(queries[1], lisbon) > _cos(queries[1], beagle)


async def test_a_long_text_keeps_its_end_for_spans(model_dir: Path) -> None:
    short = OnnxEmbedder(model_dir, max_tokens=8)
    text = "alpha beta gamma delta epsilon zeta eta theta"
    counts = await short.count_tokens([text, ""])
    assert counts == [10, 2]  # uncut: eight words and the two special tokens
    ((start, end),) = await short.embed_spans([text], [[[(0, 5)], [(len(text) - 5, len(text))]]])
    assert start is None  # "alpha" was cut: the text keeps its last six tokens
    assert end is not None


async def test_span_lists_must_match_the_texts(embedder: OnnxEmbedder) -> None:
    with pytest.raises(InvalidInputError) as raised:
        await embedder.embed_spans(["one", "two"], [[[(0, 3)]]])
    assert raised.value.field == "spans"
    assert await embedder.embed_spans([], []) == []


async def test_start_logs_the_device_it_runs_on(
    model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = OnnxEmbedder(model_dir)
    with caplog.at_level(logging.INFO, logger="memmachine.adapters.onnx.onnx_embedder"):
        await embedder.start()
    try:
        assert "runs on the CPU (onnxruntime CPUExecutionProvider)" in caplog.text
    finally:
        await embedder.close()


async def test_a_cuda_device_without_a_gpu_is_logged_as_the_cpu_fallback(
    model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No GPU and no CUDA provider here: asked for CUDA, the embedder still embeds, and
    its log says plainly, at WARNING, that it runs on the CPU instead."""
    embedder = OnnxEmbedder(model_dir, device="cuda:0")
    with caplog.at_level(logging.INFO, logger="memmachine.adapters.onnx.onnx_embedder"):
        await embedder.start()
    try:
        (record,) = [r for r in caplog.records if "loaded embedding model" in r.getMessage()]
        assert record.levelno == logging.WARNING
        assert "it runs on the CPU, not on cuda:0" in record.getMessage()
        assert "active: CPUExecutionProvider" in record.getMessage()
        cpu = OnnxEmbedder(model_dir)
        np.testing.assert_allclose(
            await embedder.embed(["the GPU path"]), await cpu.embed(["the GPU path"]), atol=1e-6
        )
    finally:
        await embedder.close()


def test_the_device_line_follows_the_active_providers() -> None:
    level, line = device_line("cuda:1", ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert level == logging.INFO
    assert line == "it runs on cuda:1 (onnxruntime CUDAExecutionProvider, CPUExecutionProvider)"
    assert device_line("cpu", ["CPUExecutionProvider"])[0] == logging.INFO
    with pytest.raises(ConfigurationError, match="embedding device"):
        OnnxEmbedder(Path("."), device="tpu")
