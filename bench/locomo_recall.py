"""LoCoMo retrieval recall: memmachine's search path against plain baselines, in one run.

Ingests every turn of each LoCoMo conversation (../shared/bench) through the real
MemoryManager (embedded stores by default; the production stores when
``MEMMACHINE_EPISODE_STORE_URL`` etc. are set, see memmachine.config), asks every scorable
question (categories 1-4) and counts how often the evidence turns are in the top K. The same
run scores plain baselines over the same turns, so comparisons hold on a noisy machine:

* ``bm25``: Okapi BM25 over the bare turn text;
* ``dense``: cosine similarity of the bare turn text's embedding (same model);
* ``hybrid``: BM25 fused with dense over ``"date speaker: text"`` (RRF k=60), the best
  simple hybrid;
* ``memmachine``: ``MemoryManager.search_episodes`` with the configured retrieval settings,
  and with ``--ablate`` the same path with one stage switched off per row; with
  ``--ablate-writes`` a stage that acts when episodes are written (context windows, lexical
  context) is measured on one more copy of the turns, ingested with that stage off. The
  analyser (Snowball stemming) is part of the index and is not switched here;
  bench/locomo_lab.py measures it.

Every returned hit takes one of the K slots, in the order returned: with ``--expand N``
the neighbouring turns that context expansion adds are results of their own. Each search
asks for top_k = 20 and is cut at K = 1, 5, 10, 20. Latency is per question: the search
itself plus the question's embedding (computed once per question and charged to every
method that uses it).

    uv run python bench/locomo_recall.py [--conversations N] [--set speaker_boost=0 ...]
        [--ablate [--ablate-writes]] [--expand N] [--data-dir DIR [--reuse]] [--json out.json]
        [--paths index,store,file] [--twice]

``--paths`` chooses which path answers memmachine's searches: ``index`` (the in-process
index, the default), ``store`` (the store's own scans, as for a user whose index is not
ready) and ``file`` (each question with the user's index out of memory, so the search opens
it from its file). Several, comma-separated, run each on the same questions in the same run
(rows ``memmachine, <path>``) and count the questions whose ranking is identical to the
first path's.

With ``--twice`` every conversation is also stored twice over (each session's turns again,
after the first copy's) and searched with the defaults and with duplicate-aware selection
off, in the same run; with several ``--paths``, that copy is also searched with the defaults
through each other path (rows ``stored twice, <path>``) and compared as the first copy is.
The copy repeats every message exactly (same scope, speaker, timestamp, text, metadata), so
the write path recognises it (memmachine/memory/repeats.py) and stores nothing new. To keep
the search-time duplicate handling measured, ``--twice`` also stores one more copy whose
repeated turns carry timestamps one second later (rows ``stored twice, copies 1 s later``):
those are stored and must be collapsed by the ``duplicates`` stage; with several ``--paths``
that copy too is searched through each other path (rows ``stored twice, copies 1 s later,
<path>``), so every path's collapse of stored duplicates is compared question by question.
The ``CPU ms/q`` column is the bench process's CPU time per search (the question's embedding
excluded): a latency measure that a busy machine does not inflate.

Results and the command that produced them: bench/RESULTS.md. Content is the turn text plus
``" [shares image: <caption>]"`` when a caption exists.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import SecretStr

from memmachine.bootstrap import build_manager
from memmachine.config import EmbeddingSettings, RetrievalSettings, Settings
from memmachine.manager import MemoryManager
from memmachine.models import NewMessage, Scope
from memmachine.ports import embed_queries
from memmachine.retrieval.text import episode_search_text

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "bench"
KS = (1, 5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
TOKEN = re.compile(r"[a-z0-9]+")
MARKER = "locomo-ingested.json"
#: The plain baselines scored in every run.
BASELINES = ("bm25", "dense", "hybrid")

#: ``--ablate``: each row switches one search-time stage off (or, for the opt-in ones, on).
ABLATIONS: dict[str, dict[str, Any]] = {
    "+ score fusion (fusion=score)": {"fusion": "score"},
    "- 'when' boost": {"when_boost": 0.0},
    "- time ranges": {"time_boost": 0.0},
    "neighbour weight 0.5 (was the default)": {"neighbour_weight": 0.5},
    "- turns two away (second neighbour)": {"second_neighbour_weight": 0.0},
    "- graph neighbourhood (both distances)": {
        "neighbour_weight": 0.0,
        "second_neighbour_weight": 0.0,
    },
    "- derivative vectors (sentences and windows)": {"sentence_derivatives": False},
    "- speaker boost": {"speaker_boost": 0.0},
    "- duplicate-aware selection": {"distinct_evidence": False},
    "+ question decomposition 0.5 (clauses)": {"decomposition_weight": 0.5},
    "+ second hop 0.3 (words of the best 3 hits)": {"second_hop_weight": 0.3},
    "+ second hop 0.1": {"second_hop_weight": 0.1},
    "+ feedback 0.1 (20 words the best 5 hits share)": {"feedback_weight": 0.1},
    "+ feedback 0.3": {"feedback_weight": 0.3},
    # the categories stage runs only with a WordNet directory (--set lexicon_dir=DIR);
    # without one these rows are the defaults
    "- WordNet categories (with --set lexicon_dir=DIR)": {"category_weight": 0.0},
    "WordNet categories on every question": {"category_lists_only": False},
    "WordNet categories of the asked-for phrase, 1024 members": {
        "category_asked_only": True,
        "category_max_members": 1024,
    },
    "- speaker focus (list and inference questions)": {"speaker_focus_weight": 0.0},
    "speaker focus 0.5 instead of 0.25": {"speaker_focus_weight": 0.5},
    "speaker focus on every question naming a speaker": {"speaker_focus_lists_only": False},
    "+ speaker focus without the names (dense list)": {"speaker_focus_unnamed": True},
    "+ speaker focus phrase 0.25 (what a list question asks for)": {
        "speaker_focus_phrase_weight": 0.25
    },
    "+ speaker focus phrase 0.25 and without the names": {
        "speaker_focus_phrase_weight": 0.25,
        "speaker_focus_unnamed": True,
    },
    "+ session diversity 0.1": {"diversity_weight": 0.1},
    "+ session diversity 0.3": {"diversity_weight": 0.3},
    "speaker boost 1.0 instead of 0.5": {"speaker_boost": 1.0},
    "+ recency": {"recency_weight": 0.5},
    "+ context expansion (1 turn each side)": {},
    "all search-time stages off (RRF, no derivatives)": {
        "fusion": "rrf",
        "speaker_focus_weight": 0.0,
        "sentence_derivatives": False,
        "speaker_boost": 0.0,
        "time_boost": 0.0,
        "when_boost": 0.0,
        "neighbour_weight": 0.0,
        "second_neighbour_weight": 0.0,
    },
}

#: ``--ablate-writes``: each row switches one write-time stage; the turns are ingested once more
#: for it, under users ``<sample_id>~<key>``, and searched with the configured settings.
WRITE_ABLATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "- context windows (write time)": ("nowindow", {"context_window": 0}),
    "windows embedded as texts, not pooled (write time)": ("texts", {"context_pooling": False}),
    "- lexical context (write time)": ("nolexical", {"lexical_context": 0}),
}
#: With ``--twice``: each conversation stored twice under ``<sample_id>~twice`` (every
#: session's turns again, after the first copy's, as a client retry or a re-import would),
#: searched with the defaults and with duplicate-aware selection off.
TWICE = "twice"
TWICE_ROW = "stored twice"
TWICE_VARIANTS: dict[str, dict[str, Any]] = {
    TWICE_ROW: {},
    "stored twice, duplicates kept (distinct_evidence=false)": {"distinct_evidence": False},
}
#: With ``--twice``: one more copy whose second send of every turn is one second later (not
#: a repeat of the message, so it is stored), under ``<sample_id>~twice-shifted``.
TWICE_SHIFTED = "twice-shifted"
SHIFT = timedelta(seconds=1)
SHIFTED_ROW = "stored twice, copies 1 s later"
TWICE_SHIFTED_VARIANTS: dict[str, dict[str, Any]] = {
    SHIFTED_ROW: {},
    "stored twice, copies 1 s later, duplicates kept (distinct_evidence=false)": {
        "distinct_evidence": False
    },
}


@dataclass
class Turn:
    dia_id: str
    speaker: str
    content: str
    timestamp: datetime
    session: int


@dataclass
class Scores:
    """any@K / all@K / frac@K per category, and per-query latency."""

    hits: dict[tuple[int, int, str], float] = field(default_factory=lambda: defaultdict(float))
    counts: Counter[int] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    #: CPU seconds of the bench process per question (a load-independent latency measure)
    cpu: list[float] = field(default_factory=list)
    #: any@10 hits and questions per conversation
    per_conversation: dict[str, list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0])
    )
    #: each question's ranked dia_ids, in question order (to compare two stores' rankings)
    rankings: list[tuple[str, ...]] = field(default_factory=list)

    def add(
        self,
        sample_id: str,
        category: int,
        evidence: set[str],
        ranked: Sequence[str],
        seconds: float,
        cpu_seconds: float = 0.0,
    ) -> None:
        """One question: ``ranked`` holds one dia_id per returned result, in order."""
        self.counts[category] += 1
        self.latencies.append(seconds)
        self.cpu.append(cpu_seconds)
        self.rankings.append(tuple(ranked))
        self.per_conversation[sample_id][0] += bool(evidence & set(ranked[:10]))
        self.per_conversation[sample_id][1] += 1
        for k in KS:
            top = set(ranked[:k])
            found = len(evidence & top)
            self.hits[category, k, "any"] += found > 0
            self.hits[category, k, "all"] += found == len(evidence)
            self.hits[category, k, "frac"] += found / len(evidence)

    def at(self, metric: str, k: int, category: int | None = None) -> float:
        cats = [category] if category else list(CATEGORIES)
        total = sum(self.counts[c] for c in cats)
        return sum(self.hits[c, k, metric] for c in cats) / total if total else 0.0

    def percentile(self, share: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[round(share * (len(ordered) - 1))] * 1000 if ordered else 0.0

    def as_json(self) -> dict[str, Any]:
        def block(category: int | None) -> dict[str, float]:
            return {
                f"{metric}@{k}": round(self.at(metric, k, category), 4)
                for metric in ("any", "all", "frac")
                for k in KS
            }

        return {
            "overall": block(None),
            "questions": sum(self.counts[c] for c in CATEGORIES),
            "by_category": {
                f"{c} {name}": {"questions": self.counts[c], **block(c)}
                for c, name in CATEGORIES.items()
            },
            "any@10_by_conversation": {
                sample: round(hit / total, 4)
                for sample, (hit, total) in self.per_conversation.items()
            },
            "p50_ms": round(self.percentile(0.5), 2),
            "p95_ms": round(self.percentile(0.95), 2),
            "cpu_ms_per_question": round(self.cpu_ms(), 3),
            "cpu_p95_ms": round(self.cpu_percentile(0.95), 3),
        }

    def cpu_percentile(self, share: float) -> float:
        """CPU milliseconds per question at ``share`` (0.95: the p95)."""
        ordered = sorted(self.cpu)
        return ordered[round(share * (len(ordered) - 1))] * 1000 if ordered else 0.0

    def cpu_ms(self) -> float:
        """Mean CPU milliseconds per question."""
        return 1000 * sum(self.cpu) / len(self.cpu) if self.cpu else 0.0


def load(
    data_dir: Path, limit: int | None, skip: int = 0
) -> tuple[dict[str, list[Turn]], list[dict[str, Any]]]:
    conversations = json.loads((data_dir / "locomo_public.json").read_text())
    questions = [
        json.loads(line)
        for line in (data_dir / "locomo_public_qa_index.jsonl").read_text().splitlines()
    ]
    if limit is not None:
        conversations = conversations[:limit]
    conversations = conversations[skip:]
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
                        start.replace(tzinfo=UTC) + timedelta(seconds=index),
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


def rrf(lists: Sequence[Sequence[int]], k: int = 60) -> list[int]:
    fused: dict[int, float] = defaultdict(float)
    for ranked in lists:
        for position, item in enumerate(ranked, start=1):
            fused[item] += 1.0 / (k + position)
    return sorted(fused, key=lambda item: -fused[item])


class Progress:
    """A one-line progress bar on stderr with rate and time left."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, total, 0
        self.started = time.monotonic()

    def step(self, count: int = 1) -> None:
        self.done += count
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate else 0.0
        filled = int(30 * self.done / max(self.total, 1))
        sys.stderr.write(
            f"\r{self.label:<34} [{'#' * filled}{'.' * (30 - filled)}] "
            f"{self.done}/{self.total} {rate:6.1f}/s ~{left:4.0f}s left "
        )
        if self.done >= self.total:
            sys.stderr.write(f"\r{self.label:<34} done: {self.total} in {elapsed:.0f}s{' ' * 30}\n")
        sys.stderr.flush()


async def run(
    args: argparse.Namespace, stores: dict[str, Any] | None = None
) -> tuple[dict[str, Scores], dict[str, Any]]:
    """Ingest, ask, score. ``stores``: Settings fields that point the stores at servers
    (``--production``); by default the stores are embedded, or set by ``MEMMACHINE_*``."""
    turns, questions = load(args.data, args.conversations, args.skip)
    embedding = (
        EmbeddingSettings(
            provider="local",
            model=str(args.model),
            onnx_file=args.onnx_file,
            quantize=args.quantize,
        )
        if args.model
        else EmbeddingSettings(provider="none")
    )
    with tempfile.TemporaryDirectory(prefix="mm-locomo-") as tmp:
        data_dir = args.data_dir or Path(tmp)
        data_dir.mkdir(parents=True, exist_ok=True)
        settings = Settings(data_dir=data_dir, embedding=embedding, **(stores or {}))
        tuning = settings.retrieval.model_copy(update=dict(args.retrieval))
        settings = settings.model_copy(update={"retrieval": tuning})
        manager = await build_manager(settings)
        await manager.start()
        try:
            marker = data_dir / MARKER
            copies: dict[str, dict[str, Any]] = {"": {}}
            if args.ablate_writes:
                copies.update(WRITE_ABLATIONS.values())
            if args.twice:
                copies[TWICE] = {}
                copies[TWICE_SHIFTED] = {}
            fingerprint = {
                "conversations": list(turns),
                "model": [str(args.model), args.onnx_file, args.quantize],
                "write": {
                    suffix: tuning.model_copy(update=change).model_dump(include=WRITE_SETTINGS)
                    for suffix, change in copies.items()
                },
            }
            ingest_costs: dict[str, dict[str, float]] = {}
            if args.reuse and _ingested(marker, fingerprint):
                sys.stderr.write(f"reusing the episodes ingested in {data_dir}\n")
            else:
                for suffix, change in copies.items():
                    for sample_id in turns:
                        await manager.forget_user(Scope(user_id=_user(sample_id, suffix)))
                    manager.retrieval = tuning.model_copy(update=change)
                    wall, cpu = time.perf_counter(), time.process_time()
                    shifts = {TWICE: [timedelta(0)] * 2, TWICE_SHIFTED: [timedelta(0), SHIFT]}
                    passes = shifts.get(suffix, [timedelta(0)])
                    for shift in passes:
                        await ingest(manager, turns, suffix, shift)
                    ingest_costs[suffix or "defaults"] = {
                        "turns": sum(len(t) for t in turns.values()) * len(passes),
                        "episodes": await _stored(manager, turns, suffix),
                        "wall_s": round(time.perf_counter() - wall, 1),
                        "bench_cpu_s": round(time.process_time() - cpu, 1),
                    }
                manager.retrieval = tuning
                marker.write_text(json.dumps(fingerprint))
            first = args.paths[0]
            variants: dict[str, Variant] = {"memmachine": (tuning, args.expand, "", first)}
            paths = await search_paths(manager, args.paths, data_dir)
            for path in args.paths[1:]:
                variants[f"memmachine, {path}"] = (tuning, args.expand, "", path)
            if args.ablate:
                for name, change in ABLATIONS.items():
                    expand = 1 if name.startswith("+ context expansion") else args.expand
                    variants[name] = (tuning.model_copy(update=change), expand, "", first)
            if args.ablate_writes:
                for name, (suffix, _) in WRITE_ABLATIONS.items():
                    variants[name] = (tuning, args.expand, suffix, first)
            if args.twice:
                for name, change in TWICE_VARIANTS.items():
                    variants[name] = (tuning.model_copy(update=change), args.expand, TWICE, first)
                for name, change in TWICE_SHIFTED_VARIANTS.items():
                    shifted = (tuning.model_copy(update=change), args.expand, TWICE_SHIFTED, first)
                    variants[name] = shifted
                # both twice-stored copies through every other path too, with the defaults:
                # the shifted one holds every turn twice, so its duplicates are collapsed by
                # each path's own search
                for path in args.paths[1:]:
                    variants[f"{TWICE_ROW}, {path}"] = (tuning, args.expand, TWICE, path)
                    shifted = (tuning, args.expand, TWICE_SHIFTED, path)
                    variants[f"{SHIFTED_ROW}, {path}"] = shifted
            results = await score(manager, turns, questions, variants, args, data_dir, paths)
            if args.rankings:
                dump_rankings(args.rankings, turns, questions, results)
        finally:
            await manager.close()
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "uv run python bench/locomo_recall.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "conversations": list(turns),
        "questions": len(questions),
        "search_top_k": max(KS),
        "expand_context": args.expand,
        "ingest": ingest_costs,
        "retrieval": tuning.model_dump(),
        "paths": args.paths,
        "ablations": {
            **{name: ABLATIONS[name] for name in results if name in ABLATIONS},
            **{name: WRITE_ABLATIONS[name][1] for name in results if name in WRITE_ABLATIONS},
            **{name: TWICE_VARIANTS[name] for name in results if name in TWICE_VARIANTS},
            **{n: TWICE_SHIFTED_VARIANTS[n] for n in results if n in TWICE_SHIFTED_VARIANTS},
        },
    }
    return results, meta


#: Settings that act when episodes are written (a copy of the data per variant).
WRITE_SETTINGS = {
    "sentence_derivatives",
    "context_window",
    "context_pooling",
    "context_stretch_tokens",
    "lexical_context",
}


def dump_rankings(
    path: Path,
    turns: dict[str, list[Turn]],
    questions: list[dict[str, Any]],
    results: dict[str, Scores],
) -> None:
    """``--rankings``: every question with each method's returned dia_ids, in the order
    :func:`score` asked them, so two runs or two rows can be compared question by question."""
    asked = [q for sample in turns for q in questions if q["sample_id"] == sample]
    rows = [
        {
            "sample_id": q["sample_id"],
            "category": q["category"],
            "question": q["question"],
            "evidence": q["evidence"],
            "rankings": {name: list(s.rankings[i]) for name, s in results.items()},
        }
        for i, q in enumerate(asked)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1))


def _user(sample_id: str, suffix: str) -> str:
    return f"{sample_id}~{suffix}" if suffix else sample_id


async def ingest(
    manager: MemoryManager,
    turns: dict[str, list[Turn]],
    suffix: str = "",
    shift: timedelta = timedelta(0),
) -> None:
    """Every turn, one message each, session by session in batches of 32, under the user
    ``sample_id`` (``<sample_id>~<suffix>`` for a write-time variant), each turn's timestamp
    ``shift`` later than LoCoMo's."""
    label = f"ingest (memmachine{', ' + suffix if suffix else ''})"
    bar = Progress(label, sum(len(t) for t in turns.values()))
    for sample_id, conversation in turns.items():
        by_session: dict[int, list[Turn]] = defaultdict(list)
        for turn in conversation:
            by_session[turn.session].append(turn)
        for number, session in by_session.items():
            scope = Scope(user_id=_user(sample_id, suffix), session_id=f"session-{number}")
            for start in range(0, len(session), 32):
                batch = session[start : start + 32]
                messages = [
                    NewMessage(
                        content=turn.content,
                        producer=turn.speaker,
                        timestamp=turn.timestamp + shift,
                        metadata={
                            "dia_id": turn.dia_id,
                            "speaker": turn.speaker,
                            "sample_id": sample_id,
                        },
                    )
                    for turn in batch
                ]
                await manager.add_messages(scope, messages, working=False)
                bar.step(len(batch))


async def _stored(manager: MemoryManager, turns: dict[str, list[Turn]], suffix: str) -> int:
    """How many episodes the copy ``suffix`` holds."""
    total = 0
    for sample_id in turns:
        _, count = await manager.list_episodes(Scope(user_id=_user(sample_id, suffix)), limit=1)
        total += count
    return total


async def embed_cached(
    manager: MemoryManager, texts: list[str], cache: Path, label: str
) -> np.ndarray[Any, Any]:
    """Embeddings of ``texts`` for the baselines, kept in ``cache`` between runs."""
    stored = _load_matrix(cache, len(texts))
    if stored is not None:
        return stored
    assert manager.embedder is not None
    bar = Progress(label, len(texts))
    vectors: list[list[float]] = []
    for start in range(0, len(texts), 64):
        vectors += await manager.embedder.embed(texts[start : start + 64])
        bar.step(len(texts[start : start + 64]))
    matrix = np.asarray(vectors, dtype=np.float32)
    np.save(cache, matrix)
    return matrix


def _load_matrix(path: Path, rows: int) -> np.ndarray[Any, Any] | None:
    if not path.exists():
        return None
    stored: np.ndarray[Any, Any] = np.load(path)
    return stored if stored.shape[0] == rows else None


def _ingested(marker: Path, fingerprint: dict[str, Any]) -> bool:
    return marker.exists() and bool(json.loads(marker.read_text()) == fingerprint)


#: ``--paths``: which path answers a search (see the module docstring).
PATHS = ("index", "store", "file")
#: One searched variant: retrieval settings, expand_context, the copy's user suffix, the path.
Variant = tuple[RetrievalSettings, int, str, str]


async def search_paths(manager: MemoryManager, wanted: Sequence[str], data_dir: Path) -> Any:
    """The episode store to search through for each path in ``wanted``: the manager's own
    (an in-process index in front of the store), the store itself, and the index kept on
    disk in ``data_dir/search-index-paths`` (evicted before every search by :func:`score`)."""
    from memmachine.adapters.indexed.indexed_episode_store import IndexedEpisodeStore

    indexed = manager.episodes
    inner = getattr(indexed, "inner", indexed)
    out: dict[str, Any] = {"index": indexed, "store": inner}
    if "file" in wanted:
        from_file = IndexedEpisodeStore(
            inner, load_inline=10**9, index_dir=data_dir / "search-index-paths", sweep_seconds=0
        )
        await from_file.start()  # the inner store is started already: only the wrapper
        out["file"] = from_file
    if "index" in wanted and not isinstance(indexed, IndexedEpisodeStore):
        raise SystemExit("--paths index: the search index is off (MEMMACHINE_SEARCH_INDEX_*)")
    return out


async def score(
    manager: MemoryManager,
    turns: dict[str, list[Turn]],
    questions: list[dict[str, Any]],
    variants: dict[str, Variant],
    args: argparse.Namespace,
    data_dir: Path,
    paths: dict[str, Any],
) -> dict[str, Scores]:
    embedder = manager.embedder
    names = [*BASELINES, *variants] if embedder else ["bm25", *variants]
    results = {name: Scores() for name in names}
    by_sample: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for question in questions:
        by_sample[question["sample_id"]].append(question)
    everything = [turn for conversation in turns.values() for turn in conversation]
    bare = contextual = None
    if embedder is not None:
        key = "-".join(turns)
        bare = await embed_cached(
            manager,
            [t.content for t in everything],
            data_dir / f"bare-{key}.npy",
            "embed (baseline, bare)",
        )
        contextual = await embed_cached(
            manager,
            [context(t) for t in everything],
            data_dir / f"context-{key}.npy",
            "embed (baseline, context)",
        )
    bar = Progress("questions", len(questions) * len(results))
    offset = 0
    for sample_id, conversation in turns.items():
        ids = [turn.dia_id for turn in conversation]
        rows = slice(offset, offset + len(conversation))
        offset += len(conversation)
        bm25 = Bm25([turn.content for turn in conversation])
        bm25_context = Bm25([context(turn) for turn in conversation])
        scope = Scope(user_id=sample_id)
        for question in by_sample[sample_id]:
            evidence = set(question["evidence"])
            category = question["category"]
            text = question["question"]

            began = time.perf_counter()
            ranked = bm25.rank(text)[: max(KS)]
            results["bm25"].add(
                sample_id,
                category,
                evidence,
                [ids[i] for i in ranked],
                time.perf_counter() - began,
            )
            bar.step()
            # the question is embedded once; every method using it is charged that time
            vector: list[float] | None = None
            embed_seconds = 0.0
            if embedder is not None:
                began = time.perf_counter()
                vector = (await embed_queries(embedder, [text]))[0]
                embed_seconds = time.perf_counter() - began
            if vector is not None and bare is not None and contextual is not None:
                query = np.asarray(vector, dtype=np.float32)
                began = time.perf_counter()
                order = np.argsort(-(bare[rows] @ query))[: max(KS)].tolist()
                results["dense"].add(
                    sample_id,
                    category,
                    evidence,
                    [ids[i] for i in order],
                    time.perf_counter() - began + embed_seconds,
                )
                bar.step()
                began = time.perf_counter()
                dense_order = np.argsort(-(contextual[rows] @ query))[:100].tolist()
                fused = rrf([bm25_context.rank(text)[:100], dense_order])[: max(KS)]
                results["hybrid"].add(
                    sample_id,
                    category,
                    evidence,
                    [ids[i] for i in fused],
                    time.perf_counter() - began + embed_seconds,
                )
                bar.step()

            for name, (tuning, expand, suffix, path) in variants.items():
                manager.retrieval = tuning
                manager.episodes = manager.episodic_service.store = paths[path]
                searched = Scope(user_id=_user(sample_id, suffix)) if suffix else scope
                if path == "file":  # the user's index out of memory: opened by the search
                    await paths[path].settled()
                    paths[path].evict(searched)
                began, cpu = time.perf_counter(), time.process_time()
                found = await manager.search_episodes(
                    searched,
                    text,
                    top_k=max(KS),
                    expand_context=expand,
                    query_vector=vector,
                )
                elapsed = time.perf_counter() - began + embed_seconds
                cpu_seconds = time.process_time() - cpu
                # one slot per returned hit, context neighbours included, in order
                returned = [hit.episode.metadata["dia_id"] for hit in found]
                results[name].add(sample_id, category, evidence, returned, elapsed, cpu_seconds)
                bar.step()
    manager.retrieval = variants["memmachine"][0]
    manager.episodes = manager.episodic_service.store = paths["index"]
    return results


def compare_paths(results: dict[str, Scores], paths: Sequence[str], row: str = "memmachine") -> str:
    """memmachine's recall through each search path, and how many questions got the very
    same ranking as through the first (``row``: the first path's row, ``memmachine`` or, with
    ``--twice``, ``stored twice``)."""
    names = [row, *(f"{row}, {path}" for path in paths[1:])]
    first = results[row]
    lines = [
        "",
        f"{row} through each search path (same run, same questions):",
        "",
        "| path | any@1 | any@5 | any@10 | any@20 | all@10 | p50 ms | p95 ms | "
        f"rankings identical to {paths[0]} |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for path, name in zip(paths, names, strict=True):
        scores = results[name]
        same = sum(a == b for a, b in zip(first.rankings, scores.rankings, strict=True))
        lines.append(
            f"| {path} | "
            + " | ".join(f"{scores.at('any', k):.3f}" for k in KS)
            + f" | {scores.at('all', 10):.3f} | {scores.percentile(0.5):.1f} | "
            f"{scores.percentile(0.95):.1f} | {same} / {len(scores.rankings)} |"
        )
    return "\n".join(lines)


def context(turn: Turn) -> str:
    return episode_search_text(
        turn.content, timestamp=turn.timestamp, producer=turn.speaker, role="user"
    )


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    system = f"{platform.system()} {platform.release()}"
    return f"{os.cpu_count()} vCPU {model}, {system}, Python {platform.python_version()}"


def summary_table(results: dict[str, Scores]) -> str:
    head = (
        ["method"]
        + [f"any@{k}" for k in KS]
        + ["all@10", "frac@10"]
        + [f"c{c} {n} any@10" for c, n in CATEGORIES.items()]
        + ["c1 multi-hop all@10", "p50 ms", "p95 ms", "CPU ms/q"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, s in results.items():
        cells = [f"{s.at('any', k):.3f}" for k in KS]
        cells += [f"{s.at('all', 10):.3f}", f"{s.at('frac', 10):.3f}"]
        cells += [f"{s.at('any', 10, c):.3f}" for c in CATEGORIES]
        cells += [f"{s.at('all', 10, 1):.3f}"]
        cells += [f"{s.percentile(0.5):.1f}", f"{s.percentile(0.95):.1f}", f"{s.cpu_ms():.2f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def stage_table(results: dict[str, Scores], base: str = "memmachine") -> str:
    """Each variant against ``base``: any@10 and the questions it gains or loses (any@10)
    in each conversation, so the rule for a default can be read off (it helps overall,
    helps more conversations than it hurts, and costs none more than one question)."""
    reference = results[base]
    samples = list(reference.per_conversation)
    head = ["variant", "any@10", "Δ any@10", *samples, "up / down"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, scores in results.items():
        if name in (base, *BASELINES) or not scores.per_conversation:
            continue
        deltas = [
            scores.per_conversation[sample][0] - reference.per_conversation[sample][0]
            for sample in samples
        ]
        up, down = sum(d > 0 for d in deltas), sum(d < 0 for d in deltas)
        change = scores.at("any", 10) - reference.at("any", 10)
        cells = [f"{scores.at('any', 10):.3f}", f"{change:+.3f}", *(f"{d:+d}" for d in deltas)]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {up} / {down} |")
    return "\n".join(lines)


def category_table(scores: Scores) -> str:
    head = ["category", "questions"] + [f"{m}@{k}" for m in ("any", "all", "frac") for k in KS]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    rows: list[tuple[str, int | None]] = [(f"c{c} {n}", c) for c, n in CATEGORIES.items()]
    rows.append(("**overall**", None))
    for label, category in rows:
        count = scores.counts[category] if category else sum(scores.counts.values())
        cells = [f"{scores.at(m, k, category):.3f}" for m in ("any", "all", "frac") for k in KS]
        lines.append(f"| {label} | {count} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _setting(text: str) -> tuple[str, Any]:
    name, _, value = text.partition("=")
    fields = RetrievalSettings.model_fields
    if name not in fields:
        raise argparse.ArgumentTypeError(f"unknown retrieval setting {name!r}")
    parsed: Any = json.loads(value.lower()) if value.lower() in ("true", "false") else value
    return name, getattr(RetrievalSettings.model_validate({name: parsed}), name)


def _paths(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names or any(name not in PATHS for name in names):
        raise argparse.ArgumentTypeError(f"--paths takes {', '.join(PATHS)}, got {text!r}")
    return list(dict.fromkeys(names))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--model",
        type=Path,
        default=REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2",
        help="local model dir; '' for lexical-only",
    )
    parser.add_argument("--onnx-file", default="onnx/model.onnx")
    parser.add_argument(
        "--quantize",
        choices=("none", "int8"),
        default="none",
        help="embed with the model's own int8 copy (MEMMACHINE_EMBEDDING_QUANTIZE)",
    )
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    parser.add_argument(
        "--skip", type=int, default=0, help="leave out the first N (with --conversations: of those)"
    )
    parser.add_argument("--expand", type=int, default=0, help="expand_context of each search")
    parser.add_argument("--ablate", action="store_true", help="also run each stage switched off")
    parser.add_argument(
        "--ablate-writes",
        action="store_true",
        help="also ingest a copy per write-time stage switched off (slow: one ingest each)",
    )
    parser.add_argument("--data-dir", type=Path, help="keep the stores here (default: a temp dir)")
    parser.add_argument(
        "--reuse", action="store_true", help="skip ingestion when --data-dir holds the same data"
    )
    parser.add_argument("--json", type=Path, help="also write every number here")
    parser.add_argument(
        "--rankings", type=Path, help="also write each question's ranked dia_ids per method here"
    )
    parser.add_argument(
        "--twice",
        action="store_true",
        help="also store every conversation twice (a retry, a re-import) and search that copy",
    )
    parser.add_argument(
        "--set",
        dest="retrieval",
        action="append",
        default=[],
        type=_setting,
        metavar="NAME=VALUE",
        help="override a RetrievalSettings field, e.g. speaker_boost=0",
    )
    parser.add_argument(
        "--paths",
        type=_paths,
        default=["index"],
        help="which path answers memmachine's searches: index (default), store, file, or "
        "several comma-separated, compared question by question",
    )
    parser.add_argument(
        "--production",
        action="store_true",
        help="run on a graph server (--graph) + PostgreSQL + Redis the bench starts itself",
    )
    parser.add_argument(
        "--graph",
        default="falkordb",
        help="with --production: falkordb, neo4j, or falkordb,neo4j for both in one run, "
        "each on fresh stores, with their rankings compared question by question",
    )
    args = parser.parse_args()
    if args.model is not None and not str(args.model):
        args.model = None
    if args.production:
        if args.data_dir is not None:
            parser.error("--production ingests into fresh servers: drop --data-dir")
        runs = on_production_stores(args)
        for graph, (results, meta) in runs.items():
            print(f"\n## {graph} + PostgreSQL + Redis\n")
            report(args, results, meta, write_json=False)
        print(compare_stores(runs))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            combined = {graph: _as_json(*run) for graph, run in runs.items()}
            args.json.write_text(json.dumps(combined, indent=2, default=str))
        return
    report(args, *asyncio.run(run(args)))


def on_production_stores(
    args: argparse.Namespace,
) -> dict[str, tuple[dict[str, Scores], dict[str, Any]]]:
    """The whole run once per graph store of ``--graph``, each on a fresh server with its
    own PostgreSQL database and Redis key prefix (bench/scale.py starts and removes them)."""
    import scale  # the sibling script: servers from tests/services.py

    graphs = scale._graphs(args.graph)
    args.postgres_admin_url = args.machine_redis_url = None
    runs: dict[str, tuple[dict[str, Scores], dict[str, Any]]] = {}
    with scale.service_servers(args), tempfile.TemporaryDirectory(prefix="mm-graph-") as tmp:
        for graph in graphs:
            token = os.urandom(4).hex()
            with (
                scale.graph_server(graph, Path(tmp) / graph) as server,
                scale.postgres_database(args.postgres_admin_url, f"mm_locomo_{token}") as pg,
            ):
                stores: dict[str, Any] = {
                    "episode_store_url": SecretStr(server.url),
                    "profile_store_url": SecretStr(pg),
                    "working_store_url": SecretStr(args.machine_redis_url),
                    "working_key_prefix": f"mm-locomo-{token}",
                }
                if server.password is not None:
                    stores["episode_store_user"] = server.user
                    stores["episode_store_password"] = SecretStr(server.password)
                sys.stderr.write(f"== {server.name} + PostgreSQL + Redis\n")
                try:
                    runs[server.name] = asyncio.run(run(args, stores))
                finally:
                    scale.delete_redis_keys(args.machine_redis_url, f"mm-locomo-{token}")
    return runs


def compare_stores(runs: dict[str, tuple[dict[str, Scores], dict[str, Any]]]) -> str:
    """memmachine's recall on each store, and how many questions got the very same ranking
    as on the first store."""
    names = list(runs)
    first = runs[names[0]][0]["memmachine"]
    lines = [
        "",
        "## memmachine on each graph store (same run)",
        "",
        "| graph store | any@1 | any@5 | any@10 | any@20 | all@10 | p50 ms | p95 ms | "
        f"rankings identical to {names[0]} | ingest s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in names:
        results, meta = runs[name]
        scores = results["memmachine"]
        same = sum(a == b for a, b in zip(first.rankings, scores.rankings, strict=True))
        ingest = sum(cost["wall_s"] for cost in meta["ingest"].values())
        lines.append(
            f"| {name} | "
            + " | ".join(f"{scores.at('any', k):.3f}" for k in KS)
            + f" | {scores.at('all', 10):.3f} | {scores.percentile(0.5):.1f} | "
            f"{scores.percentile(0.95):.1f} | {same} / {len(scores.rankings)} | {ingest:.0f} |"
        )
    return "\n".join(lines)


def report(
    args: argparse.Namespace,
    results: dict[str, Scores],
    meta: dict[str, Any],
    *,
    write_json: bool = True,
) -> None:
    """Print a run's tables (and write its JSON when asked)."""
    print(f"{meta['questions']} questions, {meta['date']}, {meta['machine']}\n")
    print(summary_table(results))
    if len(args.paths) > 1:
        print(compare_paths(results, args.paths))
        if args.twice:
            print(compare_paths(results, args.paths, TWICE_ROW))
            print(compare_paths(results, args.paths, SHIFTED_ROW))
    print("\nmemmachine per category:\n")
    print(category_table(results["memmachine"]))
    if len(results) > 4:
        print("\nEach variant against the defaults, questions gained or lost per conversation:\n")
        print(stage_table(results))
    for copy, cost in meta["ingest"].items():
        rate = cost["turns"] / cost["wall_s"] if cost["wall_s"] else float("nan")
        print(
            f"\ningest ({copy}): {cost['turns']} turns in {cost['wall_s']} s ({rate:.1f}/s), "
            f"{cost['bench_cpu_s']} CPU s in the bench process, {cost['episodes']} episodes",
            end="",
        )
    print()
    if args.json and write_json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(_as_json(results, meta), indent=2, default=str))


def _as_json(results: dict[str, Scores], meta: dict[str, Any]) -> dict[str, Any]:
    return {"meta": meta, "results": {n: s.as_json() for n, s in results.items()}}


if __name__ == "__main__":
    main()
