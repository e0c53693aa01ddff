"""Local embedder variants side by side, in one run.

The embedder alone (:class:`~memmachine.adapters.onnx.onnx_embedder.OnnxEmbedder`
through its public async API, so tokenising, padding, pooling and the worker-thread
hand-over are included). Every variant embeds the first ``--n`` LoCoMo turns (bare text),
round-robin, ``--repeats`` rounds after a warm-up; reported: texts/s (median round), CPU
seconds per 1,000 texts (this process, all threads), single-query latency p50/p95 over
``--queries`` LoCoMo questions embedded one at a time (query cache off, interleaved across
variants), and the cosine of each variant's vectors to the fp32 model's (mean, 5th
percentile, minimum), plus "alone vs batch": the lowest cosine between a text embedded on
its own and the same text embedded in the batched run (1.0 when batch mates do not matter).

Ingestion through the write path, model included, is measured by ``bench/scale.py
--ingest-profiles`` (the same episodes once per embedder and write profile).

    uv run python bench/embedder_throughput.py
    uv run python bench/embedder_throughput.py --n 1000 --repeats 3 --queries 200 \
        --model ../shared/models/all-MiniLM-L6-v2
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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from memmachine.adapters.onnx.onnx_embedder import OnnxEmbedder, Quantize, available_cpus

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "bench" / "locomo_public.json"
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2"
SESSION_KEY = re.compile(r"^session_(\d+)$")
DATE_FORMAT = "%I:%M %p on %d %B, %Y"


@dataclass(frozen=True)
class Variant:
    label: str
    onnx_file: str = "onnx/model.onnx"
    quantize: Quantize = "none"
    workers: int = 0
    threads: int = 0


VARIANTS = (
    Variant("fp32, one batch at a time on all CPUs", workers=1),
    Variant("fp32"),
    Variant("qint8 (published model_qint8.onnx)", onnx_file="onnx/model_qint8.onnx"),
    Variant("int8 (own per-channel copy)", quantize="int8"),
)


@dataclass(frozen=True)
class Turn:
    sample: str
    session: int
    speaker: str
    text: str
    timestamp: datetime


def load_locomo(path: Path) -> tuple[list[Turn], list[str]]:
    """Every turn (conversation by conversation, sessions in order) and every question."""
    conversations = json.loads(path.read_text(encoding="utf-8"))
    turns: list[Turn] = []
    questions: list[str] = []
    for conversation in conversations:
        sessions = conversation["conversation"]
        numbers = sorted(
            int(m.group(1)) for key in sessions if (m := SESSION_KEY.match(key)) is not None
        )
        for number in numbers:
            when = datetime.strptime(sessions[f"session_{number}_date_time"], DATE_FORMAT)
            for turn in sessions[f"session_{number}"]:
                text = turn["text"]
                if turn.get("blip_caption"):
                    text = f"{text} [shares image: {turn['blip_caption']}]"
                turns.append(Turn(conversation["sample_id"], number, turn["speaker"], text, when))
        questions.extend(str(qa["question"]) for qa in conversation["qa"])
    return turns, questions


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


# ---------------------------------------------------------------------- measuring


async def measure_embedders(
    args: argparse.Namespace, texts: list[str], questions: list[str]
) -> dict[str, dict[str, Any]]:
    embedders = {
        v.label: OnnxEmbedder(
            args.model,
            onnx_file=v.onnx_file,
            quantize=v.quantize,
            workers=v.workers,
            threads=v.threads,
            batch_size=args.batch,
            cache_dir=args.cache_dir,
            query_cache_size=0,
        )
        for v in VARIANTS
    }
    for embedder in embedders.values():
        await embedder.start()
        await embedder.embed(texts[:64])  # warm-up
    rates: dict[str, list[float]] = {label: [] for label in embedders}
    cpu: dict[str, list[float]] = {label: [] for label in embedders}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.repeats):
        for label, embedder in embedders.items():
            wall, started = time.perf_counter(), time.process_time()
            out = await embedder.embed(texts)
            cpu[label].append((time.process_time() - started) / len(texts) * 1000)
            rates[label].append(len(texts) / (time.perf_counter() - wall))
            vectors[label] = np.asarray(out)
    latency: dict[str, list[float]] = {label: [] for label in embedders}
    latency_cpu: dict[str, float] = dict.fromkeys(embedders, 0.0)
    for question in questions:
        for label, embedder in embedders.items():
            wall, started = time.perf_counter(), time.process_time()
            await embedder.embed([question])
            latency[label].append((time.perf_counter() - wall) * 1000)
            latency_cpu[label] += time.process_time() - started
    reference = vectors[VARIANTS[0].label]
    results: dict[str, dict[str, Any]] = {}
    for label, embedder in embedders.items():
        alone = np.asarray([(await embedder.embed([t]))[0] for t in texts[: args.alone]])
        cosines = (vectors[label] * reference).sum(axis=1)
        results[label] = {
            "texts_per_s": statistics.median(rates[label]),
            "texts_per_s_min": min(rates[label]),
            "texts_per_s_max": max(rates[label]),
            "cpu_s_per_1000": statistics.median(cpu[label]),
            "query_p50_ms": percentile(latency[label], 50),
            "query_p95_ms": percentile(latency[label], 95),
            "query_cpu_ms": latency_cpu[label] / len(questions) * 1000,
            "cos_mean": float(cosines.mean()),
            "cos_p5": percentile(cosines, 5),
            "cos_min": float(cosines.min()),
            "alone_vs_batch_min": float((alone * vectors[label][: len(alone)]).sum(axis=1).min()),
            "workers": embedder.workers,
            "threads": embedder.threads,
        }
        await embedder.close()
    return results


# ---------------------------------------------------------------------- report


def report(embed: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| variant | workers x threads | texts/s (min-max) | CPU s / 1,000 texts | "
        "query p50 / p95 ms | query CPU ms | cosine to fp32: mean / p5 / min | "
        "alone vs batch (min cos) |",
        "| --- | --- | --- | ---: | --- | ---: | --- | ---: |",
    ]
    for label, r in embed.items():
        lines.append(
            f"| {label} | {r['workers']} x {r['threads']} | {r['texts_per_s']:,.0f} "
            f"({r['texts_per_s_min']:,.0f}-{r['texts_per_s_max']:,.0f}) | "
            f"{r['cpu_s_per_1000']:.2f} | {r['query_p50_ms']:.1f} / {r['query_p95_ms']:.1f} | "
            f"{r['query_cpu_ms']:.1f} | {r['cos_mean']:.4f} / {r['cos_p5']:.4f} / "
            f"{r['cos_min']:.4f} | {r['alone_vs_batch_min']:.4f} |"
        )
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    turns, questions = load_locomo(args.data)
    texts = [turn.text for turn in turns[: args.n]]
    return {"embed": await measure_embedders(args, texts, questions[: args.queries])}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo_public.json")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="model directory")
    parser.add_argument("--n", type=int, default=1000, help="turns to embed")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per variant")
    parser.add_argument("--batch", type=int, default=64, help="embedder batch_size")
    parser.add_argument("--queries", type=int, default=200, help="questions embedded alone")
    parser.add_argument("--alone", type=int, default=200, help="turns embedded alone too")
    parser.add_argument("--cache-dir", type=Path, default=None, help="where the int8 copy is kept")
    parser.add_argument("--json", type=Path, help="also write every number here")
    args = parser.parse_args()

    load = os.getloadavg()
    print(
        f"{datetime.now().astimezone().isoformat(timespec='minutes')}, "
        f"onnxruntime {ort.__version__}, {platform.node()} {platform.machine()}, "
        f"{available_cpus()} CPUs, load average {load[0]:.1f} at start; model {args.model.name}, "
        f"{args.n} turns x {args.repeats} rounds, batch {args.batch}",
        flush=True,
    )
    results = asyncio.run(run(args))
    print(f"load average {os.getloadavg()[0]:.1f} at the end\n")
    print(report(results["embed"]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
