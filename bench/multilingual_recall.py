"""Recall of memmachine's search per language and across languages, on XQuAD.

XQuAD (bench/data/xquad, CC BY-SA 4.0) holds the same 240 Wikipedia paragraphs and 1,190
questions in English and ten other languages. Each language's paragraphs are stored as one
user's memories through the real ``MemoryManager.add_messages`` (embedded stores; the
production stores when their ``MEMMACHINE_*_URL`` is set), one paragraph a message, each in a
session of its own. Each question is asked through ``MemoryManager.search_episodes``
(top_k = 10); it is found at K when its own paragraph is among the first K hits. Asked across
languages, questions in one language search the memories of another (English questions of
the Chinese user, Chinese questions of the English one, ...).

Rows, in the same run on the same paragraphs and questions:

* ``bm25``: Okapi BM25 (k1 1.2, b 0.75) over the project analyser's terms, paragraphs alone;
* ``dense``: cosine of the configured embedder's vectors (passages for paragraphs, the
  embedder's query form for questions), paragraphs alone;
* ``memmachine lexical``: the manager with no embedder (``provider=none``);
* ``memmachine``: the manager with the configured embedder (``MEMMACHINE_EMBEDDING_*``, or the
  default).

    uv run python bench/multilingual_recall.py                     # en, zh, ru, and across
    uv run python bench/multilingual_recall.py --languages en,zh,ru,es,de,ar,hi --json out.json
    uv run python bench/multilingual_recall.py --data-dir /tmp/mm-xq --reuse  # keep the stores
    uv run python bench/multilingual_recall.py --plot bench/results/xquad.png  # matplotlib only

With ``--data-dir DIR`` the two managers' stores are kept in ``DIR/lexical`` and
``DIR/embedded``; with ``--reuse`` a language already stored there with the same paragraphs and
the same embedder is not stored again (a marker file records what each holds).
    MEMMACHINE_EMBEDDING_MODEL=/path/to/all-MiniLM-L6-v2 uv run python bench/multilingual_recall.py
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import json
import math
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memmachine import Scope  # noqa: E402
from memmachine.bootstrap import build_manager  # noqa: E402
from memmachine.config import EmbeddingSettings, Settings  # noqa: E402
from memmachine.indexing.terms import document_terms, query_terms  # noqa: E402
from memmachine.manager import MemoryManager  # noqa: E402
from memmachine.models import NewMessage  # noqa: E402

DATA = ROOT / "bench" / "data" / "xquad"
MARKER = "xquad-stored.json"
KS = (1, 5, 10)
WHEN = datetime(2024, 1, 15, 12, 0, tzinfo=UTC)
#: Question language -> memory language, asked across languages.
CROSS = (("en", "zh"), ("en", "ru"), ("zh", "en"), ("ru", "en"))


class Lang:
    """One XQuAD language: its paragraphs and its questions with their paragraph's index."""

    def __init__(self, code: str) -> None:
        data: Any = json.loads(gzip.decompress((DATA / f"xquad.{code}.json.gz").read_bytes()))
        self.code = code
        self.paragraphs: list[str] = []
        self.questions: list[tuple[str, int]] = []
        for article in data["data"]:
            for paragraph in article["paragraphs"]:
                self.paragraphs.append(paragraph["context"])
                own = len(self.paragraphs) - 1
                self.questions += [(qa["question"], own) for qa in paragraph["qas"]]


class Row:
    """Found-at-K counts and search times of one method on one (question, memory) pair."""

    def __init__(self) -> None:
        self.found = dict.fromkeys(KS, 0)
        self.asked = 0
        self.ms: list[float] = []

    def add(self, ranked: Sequence[int], own: int, ms: float | None = None) -> None:
        self.asked += 1
        for k in KS:
            self.found[k] += own in ranked[:k]
        if ms is not None:
            self.ms.append(ms)

    def cells(self) -> list[str]:
        recall = [f"{self.found[k] / max(self.asked, 1):.3f}" for k in KS]
        if not self.ms:
            return [*recall, "", ""]
        p95 = sorted(self.ms)[int(0.95 * (len(self.ms) - 1))]
        return [*recall, f"{statistics.median(self.ms):.1f}", f"{p95:.1f}"]


def bm25_ranking(paragraphs: list[str]) -> Any:
    docs = [Counter(document_terms(p)) for p in paragraphs]
    lengths = [sum(c.values()) for c in docs]
    average = sum(lengths) / len(lengths)
    frequency: Counter[str] = Counter()
    for counts in docs:
        frequency.update(counts.keys())
    n = len(docs)

    def rank(question: str) -> list[int]:
        scores = [0.0] * n
        for term in query_terms(question):
            if not frequency[term]:
                continue
            idf = math.log(1 + (n - frequency[term] + 0.5) / (frequency[term] + 0.5))
            for i, counts in enumerate(docs):
                tf = counts.get(term, 0)
                if tf:
                    norm = 1.2 * (1 - 0.75 + 0.75 * lengths[i] / average)
                    scores[i] += idf * tf * 2.2 / (tf + norm)
        return [i for i in sorted(range(n), key=lambda i: -scores[i]) if scores[i] > 0]

    return rank


def progress(text: str) -> None:
    sys.stderr.write(f"\r{text:<70}")
    sys.stderr.flush()


def _fingerprint(lang: Lang, model: str) -> str:
    return hashlib.sha256("\x00".join([model, *lang.paragraphs]).encode()).hexdigest()


async def stored(
    manager: MemoryManager, lang: Lang, data_dir: Path, model: str, reuse: bool
) -> float | None:
    """Store a language unless ``reuse`` finds it stored in ``data_dir`` already (-> None)."""
    marker = data_dir / MARKER
    held: dict[str, str] = json.loads(marker.read_text()) if marker.exists() else {}
    fingerprint = _fingerprint(lang, model)
    if reuse and held.get(lang.code) == fingerprint:
        progress(f"reusing {lang.code} stored in {data_dir}")
        return None
    held.pop(lang.code, None)
    marker.write_text(json.dumps(held))
    seconds = await store(manager, lang)
    held[lang.code] = fingerprint
    marker.write_text(json.dumps(held))
    return seconds


async def store(manager: MemoryManager, lang: Lang) -> float:
    """Store a language's paragraphs as one user's messages; returns the seconds it took."""
    user = Scope(user_id=f"xquad-{lang.code}")
    await manager.forget_user(user)
    start = time.perf_counter()
    for i, paragraph in enumerate(lang.paragraphs):
        message = NewMessage(content=paragraph, producer="wiki", timestamp=WHEN)
        await manager.add_messages(user.for_session(f"p{i}"), [message], working=False)
        if i % 20 == 0:
            progress(f"storing {lang.code}: {i}/{len(lang.paragraphs)}")
    return time.perf_counter() - start


async def ask(manager: MemoryManager, asked: Lang, memory: Lang, row: Row) -> None:
    index = {text: i for i, text in enumerate(memory.paragraphs)}
    user = Scope(user_id=f"xquad-{memory.code}")
    for n, (question, own) in enumerate(asked.questions):
        start = time.perf_counter()
        hits = await manager.search_episodes(user, question, top_k=10)
        ms = (time.perf_counter() - start) * 1000
        row.add([index.get(hit.episode.content, -1) for hit in hits], own, ms)
        if n % 50 == 0:
            progress(f"asking {asked.code} -> {memory.code}: {n}/{len(asked.questions)}")


async def dense_rows(
    manager: MemoryManager, langs: dict[str, Lang], pairs: list[tuple[str, str]]
) -> dict[tuple[str, str], Row]:
    embedder = manager.episodic_service.embedder
    if embedder is None:
        return {}
    passages = {}
    for code, lang in langs.items():
        progress(f"dense: embedding the {code} paragraphs")
        passages[code] = np.asarray(await embedder.embed(lang.paragraphs), dtype=np.float32)
    rows: dict[tuple[str, str], Row] = {}
    for asked, memory in pairs:
        row = rows[(asked, memory)] = Row()
        for n, (question, own) in enumerate(langs[asked].questions):
            if n % 100 == 0:
                progress(f"dense: asking {asked} -> {memory}: {n}/{len(langs[asked].questions)}")
            vector = await manager.embed_query(question)
            assert vector is not None
            scores = passages[memory] @ np.asarray(vector, dtype=np.float32)
            row.add(list(np.argsort(-scores)[:10]), own)
    return rows


async def run(
    args: argparse.Namespace,
) -> tuple[dict[str, dict[tuple[str, str], Row]], dict[str, Any]]:
    langs = {code: Lang(code) for code in args.languages.split(",")}
    pairs = [(code, code) for code in langs]
    if args.cross:
        pairs += [(a, m) for a, m in CROSS if a in langs and m in langs]
    rows: dict[str, dict[tuple[str, str], Row]] = {"bm25": {}}
    for asked, memory in pairs:
        rank = bm25_ranking(langs[memory].paragraphs)
        row = rows["bm25"][(asked, memory)] = Row()
        for question, own in langs[asked].questions:
            row.add(rank(question), own)
    meta: dict[str, Any] = {"ingest_seconds": {}}
    with tempfile.TemporaryDirectory(prefix="mm-xquad-") as tmp:
        for name, embedding in (
            ("memmachine lexical", EmbeddingSettings(provider="none")),
            ("memmachine", None),
        ):
            base = args.data_dir or Path(tmp)
            data_dir = base / ("lexical" if embedding is not None else "embedded")
            data_dir.mkdir(parents=True, exist_ok=True)
            settings = Settings(data_dir=data_dir)
            if embedding is not None:
                settings = settings.model_copy(update={"embedding": embedding})
            manager = await build_manager(settings)
            await manager.start()
            try:
                if embedding is None:
                    embedder = manager.episodic_service.embedder
                    meta["embedder"] = embedder.model if embedder else "none (lexical only)"
                    rows["dense"] = await dense_rows(manager, langs, pairs)
                embedder = manager.episodic_service.embedder
                model = embedder.model if embedder else "none"
                for lang in langs.values():
                    seconds = await stored(manager, lang, data_dir, model, args.reuse)
                    meta["ingest_seconds"][f"{name} {lang.code}"] = seconds
                rows[name] = {}
                for asked, memory in pairs:
                    row = rows[name][(asked, memory)] = Row()
                    await ask(manager, langs[asked], langs[memory], row)
            finally:
                await manager.close()
    sys.stderr.write("\n")
    return rows, meta


def table(rows: dict[str, dict[tuple[str, str], Row]]) -> str:
    lines = [
        "| asked in → memories in | method | recall@1 | recall@5 | recall@10 | p50 ms | p95 ms |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    pairs = list(next(iter(rows.values())).keys())
    for pair in pairs:
        for name, by_pair in rows.items():
            if pair in by_pair:
                cells = " | ".join(by_pair[pair].cells())
                lines.append(f"| {pair[0]} → {pair[1]} | {name} | {cells} |")
    return "\n".join(lines)


def plot(rows: dict[str, dict[tuple[str, str], Row]], out: Path) -> None:
    """Recall@10 per (question, memory) language pair and method, as a bar chart (PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("matplotlib is not installed: no plot\n")
        return
    pairs = list(next(iter(rows.values())).keys())
    width = 0.8 / len(rows)
    fig, axes = plt.subplots(figsize=(max(6, 1.4 * len(pairs)), 4))
    for k, (name, by_pair) in enumerate(rows.items()):
        values = [by_pair[p].found[10] / by_pair[p].asked if p in by_pair else 0 for p in pairs]
        axes.bar([i + k * width for i in range(len(pairs))], values, width, label=name)
    axes.set_xticks([i + 0.4 - width / 2 for i in range(len(pairs))])
    axes.set_xticklabels([f"{a} → {m}" for a, m in pairs])
    axes.set_ylim(0, 1)
    axes.set_ylabel("recall@10")
    axes.set_title("XQuAD: the question's paragraph among the first 10 hits")
    axes.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--languages", default="en,zh,ru", help="XQuAD languages, comma-separated")
    parser.add_argument(
        "--cross",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also ask across languages (en<->zh, en<->ru; the default); --no-cross: same only",
    )
    parser.add_argument("--data-dir", type=Path, help="keep the stores here (default: a temp dir)")
    parser.add_argument(
        "--reuse", action="store_true", help="skip storing a language --data-dir already holds"
    )
    parser.add_argument("--plot", type=Path, help="recall@10 bar chart (PNG; needs matplotlib)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    rows, meta = asyncio.run(run(args))
    print(table(rows))
    print(f"\nembedder: {meta.get('embedder')}; ingest seconds: {meta['ingest_seconds']}")
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        out = {
            name: {
                f"{a}->{m}": {"found": r.found, "asked": r.asked, "ms": r.ms}
                for (a, m), r in by.items()
            }
            for name, by in rows.items()
        }
        args.json.write_text(json.dumps({"rows": out, "meta": meta}, indent=1, default=str))


if __name__ == "__main__":
    main()
