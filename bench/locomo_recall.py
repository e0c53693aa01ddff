"""LoCoMo retrieval recall: memmachine's hybrid search against plain baselines, one run.

Ingests every turn of each LoCoMo conversation (../shared/bench) through the real
MemoryManager on embedded stores, asks every scorable question, and counts how often the
evidence turns are in the top K. In the same run it scores two plain baselines over the
same turns, so the comparison holds on a noisy machine:

* ``bm25``  — Okapi BM25 over the bare turn text;
* ``dense`` — cosine similarity of the bare turn text's embedding (same model);
* ``mm-fulltext`` / ``mm-dense`` — each signal of the product path alone, over the
  "date speaker: text" form each episode is indexed under;
* ``memmachine`` — the product path: both signals fused by reciprocal rank.

    uv run python bench/locomo_recall.py [--conversations N] [--set rrf_k=20 ...]

Results and the command that produced them: bench/RESULTS.md.

Content is the turn text plus " [shares image: <caption>]" when a caption exists.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from memmachine.bootstrap import build_manager
from memmachine.config import EmbeddingSettings, Settings
from memmachine.manager import MemoryManager
from memmachine.models import MemoryType, NewMessage, Scope

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "bench"
KS = (1, 5, 10, 20, 50)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
TOKEN = re.compile(r"[a-z0-9]+")


@dataclass
class Turn:
    dia_id: str
    speaker: str
    content: str
    timestamp: datetime
    session: int


@dataclass
class Scores:
    """any@K / all@K hits per category, and per-query latency."""

    hits_any: dict[int, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    hits_all: dict[int, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    counts: Counter[int] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)

    def add(self, category: int, evidence: set[str], ranked: list[str], seconds: float) -> None:
        self.counts[category] += 1
        self.latencies.append(seconds)
        for k in KS:
            top = set(ranked[:k])
            self.hits_any[category][k] += bool(evidence & top)
            self.hits_all[category][k] += evidence <= top

    def any_at(self, k: int, category: int | None = None) -> float:
        cats = [category] if category else list(CATEGORIES)
        total = sum(self.counts[c] for c in cats)
        return sum(self.hits_any[c][k] for c in cats) / total if total else 0.0

    def all_at(self, k: int) -> float:
        total = sum(self.counts[c] for c in CATEGORIES)
        return sum(self.hits_all[c][k] for c in CATEGORIES) / total if total else 0.0


def load(data_dir: Path, limit: int | None) -> tuple[dict[str, list[Turn]], list[dict[str, Any]]]:
    conversations = json.loads((data_dir / "locomo_public.json").read_text())
    questions = [
        json.loads(line)
        for line in (data_dir / "locomo_public_qa_index.jsonl").read_text().splitlines()
    ]
    if limit is not None:
        conversations = conversations[:limit]
    turns: dict[str, list[Turn]] = {}
    for conversation in conversations:
        body = conversation["conversation"]
        sessions = sorted(
            int(key.split("_")[1]) for key in body if re.fullmatch(r"session_\d+", key)
        )
        out = []
        for number in sessions:
            start = datetime.strptime(body[f"session_{number}_date_time"], "%I:%M %p on %d %B, %Y")
            for index, turn in enumerate(body[f"session_{number}"]):
                text = turn["text"]
                if turn.get("blip_caption"):
                    text += f" [shares image: {turn['blip_caption']}]"
                out.append(
                    Turn(
                        turn["dia_id"],
                        turn["speaker"],
                        text,
                        start + timedelta(seconds=index),
                        number,
                    )
                )
        turns[conversation["sample_id"]] = out
    wanted = set(turns)
    scorable = [q for q in questions if q["scorable"] and q["sample_id"] in wanted]
    return turns, scorable


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


class Bm25:
    """Okapi BM25 (k1=1.2, b=0.75) over a fixed list of documents."""

    def __init__(self, documents: list[str]) -> None:
        self.docs = [Counter(tokens(doc)) for doc in documents]
        self.lengths = [sum(doc.values()) for doc in self.docs]
        self.avg = sum(self.lengths) / max(len(self.docs), 1)
        df: Counter[str] = Counter()
        for doc in self.docs:
            df.update(doc.keys())
        n = len(self.docs)
        self.idf = {term: math.log(1 + (n - f + 0.5) / (f + 0.5)) for term, f in df.items()}

    def rank(self, query: str) -> list[int]:
        terms = set(tokens(query))
        scores = []
        for index, doc in enumerate(self.docs):
            score = 0.0
            norm = 1.2 * (0.25 + 0.75 * self.lengths[index] / self.avg)
            for term in terms:
                tf = doc.get(term, 0)
                if tf:
                    score += self.idf[term] * tf * 2.2 / (tf + norm)
            scores.append(score)
        return [i for i in np.argsort(scores)[::-1].tolist() if scores[i] > 0]


def progress(label: str, done: int, total: int, started: float) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    rate = done / max(time.monotonic() - started, 1e-9)
    sys.stderr.write(
        f"\r{label:<28} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {rate:6.1f}/s"
    )
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


async def run(args: argparse.Namespace) -> dict[str, Scores]:
    turns, questions = load(args.data, args.conversations)
    embedding = (
        EmbeddingSettings(provider="local", model=str(args.model), onnx_file=args.onnx_file)
        if args.model
        else EmbeddingSettings(provider="none")
    )
    names = ("bm25", "dense", "mm-fulltext", "mm-dense", "memmachine")
    results = {name: Scores() for name in names}
    with tempfile.TemporaryDirectory(prefix="mm-locomo-") as tmp:
        settings = Settings(data_dir=Path(tmp), embedding=embedding)
        tuning = settings.retrieval.model_copy(update=dict(args.retrieval))
        settings = settings.model_copy(update={"retrieval": tuning})
        manager = await build_manager(settings)
        await manager.start()
        try:
            await ingest(manager, turns)
            await score(manager, turns, questions, results, args.top_k)
        finally:
            await manager.close()
    if manager.embedder is None:
        del results["dense"], results["mm-dense"]
    return results


async def ingest(manager: MemoryManager, turns: dict[str, list[Turn]]) -> None:
    total = sum(len(t) for t in turns.values())
    done, started = 0, time.monotonic()
    for sample_id, conversation in turns.items():
        by_session: dict[int, list[Turn]] = defaultdict(list)
        for turn in conversation:
            by_session[turn.session].append(turn)
        for number, session in by_session.items():
            scope = Scope(user_id=sample_id, session_id=f"session-{number}")
            messages = [
                NewMessage(
                    content=turn.content,
                    producer=turn.speaker,
                    timestamp=turn.timestamp,
                    metadata={
                        "dia_id": turn.dia_id,
                        "speaker": turn.speaker,
                        "sample_id": sample_id,
                    },
                )
                for turn in session
            ]
            await manager.add_messages(scope, messages, working=False)
            done += len(session)
            progress("ingest (memmachine)", done, total, started)


async def score(
    manager: MemoryManager,
    turns: dict[str, list[Turn]],
    questions: list[dict[str, Any]],
    results: dict[str, Scores],
    top_k: int,
) -> None:
    embedder = manager.embedder
    by_sample: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for question in questions:
        by_sample[question["sample_id"]].append(question)
    done, started = 0, time.monotonic()
    for sample_id, conversation in turns.items():
        ids = [turn.dia_id for turn in conversation]
        bm25 = Bm25([turn.content for turn in conversation])
        matrix = None
        if embedder is not None:
            matrix = np.asarray(await embedder.embed([turn.content for turn in conversation]))
        scope = Scope(user_id=sample_id)
        for question in by_sample[sample_id]:
            evidence = set(question["evidence"])
            category = question["category"]
            text = question["question"]

            began = time.perf_counter()
            ranked = bm25.rank(text)[:top_k]
            results["bm25"].add(
                category, evidence, [ids[i] for i in ranked], time.perf_counter() - began
            )

            if embedder is not None and matrix is not None:
                began = time.perf_counter()
                vector = np.asarray((await embedder.embed([text]))[0])
                order = np.argsort(-(matrix @ vector))[:top_k].tolist()
                results["dense"].add(
                    category, evidence, [ids[i] for i in order], time.perf_counter() - began
                )

            # ablations: each signal of the product path on its own
            began = time.perf_counter()
            lexical = await manager.episodes.fulltext_search(scope, text, top_k)
            results["mm-fulltext"].add(
                category,
                evidence,
                [e.metadata["dia_id"] for e, _ in lexical],
                time.perf_counter() - began,
            )
            if embedder is not None:
                began = time.perf_counter()
                vector = (await embedder.embed([text]))[0]
                dense_hits = await manager.episodes.vector_search(scope, vector, top_k)
                results["mm-dense"].add(
                    category,
                    evidence,
                    [e.metadata["dia_id"] for e, _ in dense_hits],
                    time.perf_counter() - began,
                )

            began = time.perf_counter()
            found = await manager.search(scope, text, top_k=top_k, types=[MemoryType.EPISODIC])
            elapsed = time.perf_counter() - began
            results["memmachine"].add(
                category,
                evidence,
                [hit.episode.metadata["dia_id"] for hit in found.episodic],
                elapsed,
            )
            done += 1
            progress("questions", done, len(questions), started)


def table(results: dict[str, Scores]) -> str:
    lines = [
        "| method | any@1 | any@5 | any@10 | any@20 | any@50 | all@10 | "
        + " | ".join(f"c{c} any@10" for c in CATEGORIES)
        + " | p50 ms | p95 ms |",
        "|" + " --- |" * (9 + len(CATEGORIES)),
    ]
    for name, scores in results.items():
        latencies = sorted(scores.latencies)
        p50 = statistics.median(latencies) * 1000
        p95 = latencies[int(0.95 * (len(latencies) - 1))] * 1000
        cells = [f"{scores.any_at(k):.3f}" for k in KS] + [f"{scores.all_at(10):.3f}"]
        cells += [f"{scores.any_at(10, c):.3f}" for c in CATEGORIES]
        cells += [f"{p50:.1f}", f"{p95:.1f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _setting(text: str) -> tuple[str, float]:
    name, _, value = text.partition("=")
    number = float(value)
    return name, int(
        number
    ) if number.is_integer() and name != "vector_weight" and name != "fulltext_weight" else number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--model",
        type=Path,
        default=REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2",
        help="local model dir; '' for lexical-only",
    )
    parser.add_argument("--onnx-file", default="onnx/model.onnx")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    parser.add_argument("--top-k", type=int, default=max(KS))
    parser.add_argument("--json", type=Path, help="also write raw numbers here")
    parser.add_argument(
        "--set",
        dest="retrieval",
        action="append",
        default=[],
        type=_setting,
        metavar="NAME=VALUE",
        help="override a RetrievalSettings field, e.g. rrf_k=20",
    )
    args = parser.parse_args()
    if args.model is not None and not str(args.model):
        args.model = None
    results = asyncio.run(run(args))
    print(table(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    name: {f"any@{k}": s.any_at(k) for k in KS} | {"all@10": s.all_at(10)}
                    for name, s in results.items()
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
