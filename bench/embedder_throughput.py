"""Local embedder throughput: fp32 against qint8 ONNX, at two batch sizes, in one run.

Embeds the first N LoCoMo turns (bare ``text``, in conversation/session order) with
:class:`~memmachine.adapters.onnx_embedder.OnnxEmbedder` through its public async API, so
the numbers include tokenising, padding, pooling and the worker-thread hand-over. The four
configurations are measured round-robin, ``--repeats`` times each, after one warm-up call,
and the median is reported; the qint8/fp32 ratio comes from the same run because the machine
is noisy.

    uv run python bench/embedder_throughput.py
    uv run python bench/embedder_throughput.py --model ../shared/models/all-MiniLM-L6-v2 \
        --data ../shared/bench/locomo_public.json --n 1000 --repeats 3 --threads 0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import time
from pathlib import Path

import onnxruntime as ort

from memmachine.adapters.onnx_embedder import OnnxEmbedder

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "bench" / "locomo_public.json"
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2"
VARIANTS = {"fp32": "onnx/model.onnx", "qint8": "onnx/model_qint8.onnx"}
BATCH_SIZES = (16, 64)
SESSION_KEY = re.compile(r"^session_(\d+)$")


def load_turns(path: Path, n: int) -> list[str]:
    """The first ``n`` turn texts of the LoCoMo file, conversation by conversation."""
    conversations = json.loads(path.read_text(encoding="utf-8"))
    texts: list[str] = []
    for conversation in conversations:
        sessions = conversation["conversation"]
        numbers = sorted(
            int(m.group(1)) for key in sessions if (m := SESSION_KEY.match(key)) is not None
        )
        for number in numbers:
            texts.extend(turn["text"] for turn in sessions[f"session_{number}"])
            if len(texts) >= n:
                return texts[:n]
    return texts


async def measure(
    model_dir: Path, texts: list[str], repeats: int, threads: int
) -> dict[tuple[str, int], list[float]]:
    """Sentences per second for every (variant, batch size), ``repeats`` rounds each."""
    embedders = {
        (variant, batch): OnnxEmbedder(
            model_dir, onnx_file=onnx_file, batch_size=batch, threads=threads
        )
        for variant, onnx_file in VARIANTS.items()
        for batch in BATCH_SIZES
    }
    for embedder in embedders.values():
        await embedder.start()
        await embedder.embed(texts[:64])  # warm-up
    rates: dict[tuple[str, int], list[float]] = {key: [] for key in embedders}
    for _ in range(repeats):
        for key, embedder in embedders.items():
            started = time.perf_counter()
            vectors = await embedder.embed(texts)
            elapsed = time.perf_counter() - started
            assert len(vectors) == len(texts)
            rates[key].append(len(texts) / elapsed)
    for embedder in embedders.values():
        await embedder.close()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo_public.json")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="model directory")
    parser.add_argument("--n", type=int, default=1000, help="turns to embed")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per config")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = auto)")
    args = parser.parse_args()

    texts = load_turns(args.data, args.n)
    words = statistics.mean(len(t.split()) for t in texts)
    print(
        f"{len(texts)} LoCoMo turns (mean {words:.1f} words), model {args.model.name}, "
        f"onnxruntime {ort.__version__}, {os.cpu_count()} CPUs ({platform.machine()}), "
        f"threads={args.threads or 'auto'}, median of {args.repeats} rounds"
    )
    rates = asyncio.run(measure(args.model, texts, args.repeats, args.threads))

    print()
    print("| model | batch | sentences/s (median) | min | max |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for (variant, batch), values in rates.items():
        print(
            f"| {variant} | {batch} | {statistics.median(values):,.0f} | "
            f"{min(values):,.0f} | {max(values):,.0f} |"
        )
    print()
    print("| batch | qint8 / fp32 |")
    print("| ---: | ---: |")
    for batch in BATCH_SIZES:
        ratio = statistics.median(rates["qint8", batch]) / statistics.median(rates["fp32", batch])
        print(f"| {batch} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
