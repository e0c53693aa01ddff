"""A fast numpy replica of memmachine's episode search on LoCoMo, for trying retrieval ideas.

``bench/locomo_recall.py`` runs the real stores and takes minutes; this lab embeds every text
once with the real ONNX model (turns, sentence derivatives, context windows, questions),
caches the vectors under ``/tmp`` (never in the repository), and replays
``MemoryManager.search_episodes`` in numpy with the core's own text helpers (analyser,
window texts, time expressions), so one variant is scored on all six conversations in
seconds. Checked against the real bench: ``previous defaults`` gives the memmachine row of
the earlier run exactly (any@10 0.767), ``defaults`` the current one.

    uv run python bench/locomo_lab.py                       # every named variant, all six
    uv run python bench/locomo_lab.py --variant defaults --variant "- when boost"
    uv run python bench/locomo_lab.py --split               # also on 0-2 and on 3-5

Scoring is the bench's: categories 1-4, query = the question, one turn = one result slot.
Per-conversation any@10 deltas against the first variant are printed so the rule for a
default can be checked (helps overall, helps more conversations than it hurts, costs no
conversation more than one question).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import sys
import time
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from locomo_recall import CATEGORIES, DEFAULT_DATA, REPO, Turn, load

from memmachine.config import EmbeddingSettings
from memmachine.indexing.terms import (
    MAX_QUERY_TERMS,
    MAX_TERM_CHARS,
    STOPWORDS,
    TERM_PATTERN,
    document_terms,
)
from memmachine.retrieval.derivatives import split_sentences
from memmachine.retrieval.speakers import named_speakers
from memmachine.retrieval.temporal import asks_when, mentions_time, time_ranges
from memmachine.retrieval.text import episode_search_text, indexed_text, window_text

CACHE = Path("/tmp/memmachine-locomo-lab")
TOP = 20
Matrix = np.ndarray[Any, Any]


# ---------------------------------------------------------------------------- embeddings


class _VectorCache:
    """Vectors by key, kept in ``CACHE/<kind>-<tag>.npz`` (the tag names the model file)."""

    def __init__(self, kind: str, model: Path, onnx_file: str) -> None:
        source = f"{model.resolve()}|{onnx_file}"
        if kind != "vectors":  # the first cache's file name predates the kind
            source = f"{kind}|{source}"
        tag = hashlib.sha1(source.encode()).hexdigest()[:10]
        self.path = CACHE / f"{kind}-{tag}.npz"
        self.model, self.onnx_file = model, onnx_file
        self.index: dict[str, int] = {}
        self.rows: list[Matrix] = []
        if self.path.exists():
            stored = np.load(self.path, allow_pickle=False)
            self.index = {key: i for i, key in enumerate(stored["keys"].tolist())}
            self.rows = [stored["vectors"]]

    def _keep(self, keys: Sequence[str], vectors: Matrix) -> None:
        """Add ``vectors`` under ``keys`` (row by row) and write the cache file."""
        base = sum(len(r) for r in self.rows)
        for i, key in enumerate(keys):
            self.index[key] = base + i
        self.rows = [np.concatenate([*self.rows, vectors])]
        CACHE.mkdir(parents=True, exist_ok=True)
        ordered = sorted(self.index, key=self.index.__getitem__)
        np.savez(self.path, keys=np.asarray(ordered), vectors=self.rows[0])


class Vectors(_VectorCache):
    """Embeddings of texts, computed once with the real embedder and kept in ``CACHE``."""

    def __init__(self, model: Path, onnx_file: str) -> None:
        super().__init__("vectors", model, onnx_file)
        self.embedder: Any = None

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def ensure(self, texts: Iterable[str]) -> None:
        missing = list(dict.fromkeys(t for t in texts if self.key(t) not in self.index))
        if not missing:
            return
        from memmachine.bootstrap.embedders import build_embedder

        if self.embedder is None:
            settings = EmbeddingSettings(
                provider="local", model=str(self.model), onnx_file=self.onnx_file
            )
            self.embedder = build_embedder(settings)
        embedder = self.embedder
        assert embedder is not None, "the embedding model could not be loaded"
        began = time.monotonic()
        out: list[list[float]] = []
        for start in range(0, len(missing), 256):
            out += asyncio.run(embedder.embed(missing[start : start + 256]))
            sys.stderr.write(f"\rembedding {len(out)}/{len(missing)} ")
        sys.stderr.write(f"in {time.monotonic() - began:.0f}s\n")
        self._keep([self.key(text) for text in missing], np.asarray(out, dtype=np.float32))

    @property
    def matrix(self) -> Matrix:
        return self.rows[0] if self.rows else np.zeros((0, 384), dtype=np.float32)

    def of(self, texts: Sequence[str]) -> Matrix:
        self.ensure(texts)
        return self.matrix[[self.index[self.key(t)] for t in texts]]


class SpanVectors(_VectorCache):
    """Vectors mean-pooled over parts of a text's token states: one model run per text, one
    vector per requested set of character ranges (with [CLS] and [SEP] always in), the way
    the write path could derive a message's sentence vectors, or the message's own vector,
    from a single run. Computed once with the real ONNX model and cached under ``CACHE``."""

    def __init__(self, model: Path, onnx_file: str) -> None:
        super().__init__("spans", model, onnx_file)
        self.tokens = 0  # tokens run through the model by this instance

    @staticmethod
    def key(text: str, ranges: Sequence[tuple[int, int]]) -> str:
        return hashlib.sha1(f"{text}|{list(ranges)}".encode()).hexdigest()

    def of(self, requests: Sequence[tuple[str, Sequence[tuple[int, int]]]]) -> Matrix:
        wanted: dict[str, list[Sequence[tuple[int, int]]]] = defaultdict(list)
        for text, ranges in requests:
            if self.key(text, ranges) not in self.index:
                wanted[text].append(ranges)
        if wanted:
            self._compute(wanted)
        return self.rows[0][[self.index[self.key(t, r)] for t, r in requests]]

    def _compute(self, wanted: dict[str, list[Sequence[tuple[int, int]]]]) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self.model / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=256)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(
            str(self.model / self.onnx_file), options, providers=["CPUExecutionProvider"]
        )
        names = {i.name for i in session.get_inputs()}
        texts = sorted(wanted, key=len)
        keys: list[str] = []
        out: list[Matrix] = []
        began = time.monotonic()
        for start in range(0, len(texts), 32):
            batch = texts[start : start + 32]
            encodings = tokenizer.encode_batch(batch)
            width = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, encoding in enumerate(encodings):
                ids[row, : len(encoding.ids)] = encoding.ids
                mask[row, : len(encoding.ids)] = 1
                self.tokens += len(encoding.ids)
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in names:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = session.run(None, feeds)[0]
            for row, (text, encoding) in enumerate(zip(batch, encodings, strict=True)):
                offsets = encoding.offsets
                special = np.asarray(encoding.special_tokens_mask, dtype=bool)
                for ranges in wanted[text]:
                    pick = special.copy()
                    for j, (a, b) in enumerate(offsets):
                        if b > a and any(lo <= a and b <= hi for lo, hi in ranges):
                            pick[j] = True
                    vector = hidden[row, : len(offsets)][pick].mean(axis=0)
                    out.append((vector / np.linalg.norm(vector)).astype(np.float32))
                    keys.append(self.key(text, ranges))
            sys.stderr.write(f"\rspan vectors {start + len(batch)}/{len(texts)} texts ")
        sys.stderr.write(f"in {time.monotonic() - began:.0f}s\n")
        self._keep(keys, np.stack(out))


# ---------------------------------------------------------------------------- derivatives


def day_of(turn: Turn) -> str:
    return f"{turn.timestamp.day} {turn.timestamp:%B %Y}"


def search_text(turn: Turn) -> str:
    return episode_search_text(
        turn.content, timestamp=turn.timestamp, producer=turn.speaker, role="user"
    )


def sentence_texts(turn: Turn, _: Sequence[Turn], __: int) -> list[str]:
    return [
        episode_search_text(s, timestamp=turn.timestamp, producer=turn.speaker, role="user")
        for s in split_sentences(turn.content)
    ]


def _said(turns: Sequence[Turn]) -> list[tuple[str, str]]:
    return [(t.speaker, t.content) for t in turns]


def context_texts(turn: Turn, session: Sequence[Turn], index: int) -> list[str]:
    """The core's context window: the turn read after up to two turns before it."""
    if index == 0:
        return []
    return [window_text(_said(session[max(index - 2, 0) : index + 1]), timestamp=turn.timestamp)]


def previous_texts(turn: Turn, session: Sequence[Turn], index: int) -> list[str]:
    """A window of the turn before and this one."""
    return (
        [window_text(_said(session[index - 1 : index + 1]), timestamp=turn.timestamp)]
        if index
        else []
    )


def next_texts(turn: Turn, session: Sequence[Turn], index: int) -> list[str]:
    """The turn read before the one after it."""
    if index + 1 >= len(session):
        return []
    return [window_text(_said(session[index : index + 2]), timestamp=turn.timestamp)]


def around_texts(turn: Turn, session: Sequence[Turn], index: int) -> list[str]:
    """The turn between the one before and the one after it."""
    if index == 0 or index + 1 >= len(session):
        return []
    return [window_text(_said(session[index - 1 : index + 2]), timestamp=turn.timestamp)]


SpanRequest = tuple[str, list[tuple[int, int]]]


def _sentence_ranges(text: str, content_at: int, content: str) -> list[tuple[int, int]]:
    """Character ranges in ``text`` of each sentence of ``content``, which starts at
    ``content_at``."""
    ranges = []
    cursor = 0
    for sentence in split_sentences(content):
        found = content.find(sentence, cursor)
        if found < 0:
            continue
        ranges.append((content_at + found, content_at + found + len(sentence)))
        cursor = found + len(sentence)
    return ranges


def pooled_sentences(turn: Turn, _: Sequence[Turn], __: int) -> list[SpanRequest]:
    """Each sentence pooled from one run over the turn's own search text, with the text's
    ``"<date> <speaker>:"`` prefix tokens (as the separate sentence texts have)."""
    text = search_text(turn)
    at = text.index(turn.content) if turn.content else len(text)
    return [
        (text, [(0, at), span])
        for span in _sentence_ranges(text, at, turn.content)
        if len(split_sentences(turn.content)) > 1
    ]


def _window(turn: Turn, session: Sequence[Turn], index: int) -> tuple[str, int, int]:
    """The core's window text of a turn (itself alone at a session's start), where its own
    line starts, and where its content starts."""
    said = _said(session[max(index - 2, 0) : index + 1])
    text = window_text(said, timestamp=turn.timestamp)
    line = text.rindex(f"{turn.speaker}: {turn.content}")
    return text, line, line + len(turn.speaker) + 2


def window_own(turn: Turn, session: Sequence[Turn], index: int) -> list[SpanRequest]:
    """The turn's own vector pooled inside its window run: the date and its own line."""
    text, line, _ = _window(turn, session, index)
    return [(text, [(0, len(day_of(turn))), (line, len(text))])]


def window_sentences(turn: Turn, session: Sequence[Turn], index: int) -> list[SpanRequest]:
    """Each sentence pooled inside the turn's window run, with the date and the speaker."""
    if len(split_sentences(turn.content)) < 2:
        return []
    text, line, at = _window(turn, session, index)
    prefix = [(0, len(day_of(turn))), (line, at)]
    return [(text, [*prefix, span]) for span in _sentence_ranges(text, at, turn.content)]


def window_whole(turn: Turn, session: Sequence[Turn], index: int) -> list[SpanRequest]:
    """The whole window run pooled (the window vector), at every turn but a session's first."""
    if index == 0:
        return []
    text, _, _ = _window(turn, session, index)
    return [(text, [(0, len(text))])]


SPAN_KINDS: dict[str, Callable[[Turn, Sequence[Turn], int], list[SpanRequest]]] = {
    "pooled-sentence": pooled_sentences,
    "window-sentence": window_sentences,
    "window-whole": window_whole,
}
#: Own vectors: ``own`` embeds the search text; ``window-own`` pools it from the window run.
OWN_KINDS = ("own", "window-own")

DERIVATIVES: dict[str, Callable[[Turn, Sequence[Turn], int], list[str]]] = {
    "sentence": sentence_texts,
    "context": context_texts,
    "previous": previous_texts,
    "next": next_texts,
    "around": around_texts,
}


# ---------------------------------------------------------------------------- lexical


class Bm25Index:
    """BM25 (k1 1.2, b 0.75) over the scope, as ``CypherEpisodeStore.fulltext_search``."""

    def __init__(self, documents: list[list[str]], k1: float = 1.2, b: float = 0.75) -> None:
        self.n = len(documents)
        self.lengths = np.asarray([len(d) for d in documents], dtype=np.float64)
        self.avg = float(self.lengths.mean()) if self.n else 0.0
        self.postings: dict[str, dict[int, int]] = defaultdict(dict)
        for i, doc in enumerate(documents):
            for term in doc:
                self.postings[term][i] = self.postings[term].get(i, 0) + 1
        self.k1, self.b = k1, b
        self.norm = k1 * (1 - b + b * self.lengths / max(self.avg, 1e-9))

    def idf(self, term: str) -> float:
        df = len(self.postings.get(term, ()))
        return math.log(1 + (self.n - df + 0.5) / (df + 0.5))

    def scores(self, terms: Sequence[str], weights: Sequence[float] | None = None) -> Matrix:
        out = np.zeros(self.n)
        for j, term in enumerate(terms):
            posting = self.postings.get(term)
            if not posting:
                continue
            docs = np.fromiter(posting.keys(), dtype=np.int64)
            tf = np.fromiter(posting.values(), dtype=np.float64)
            weight = 1.0 if weights is None else weights[j]
            out[docs] += weight * self.idf(term) * tf * (self.k1 + 1) / (tf + self.norm[docs])
        return out


# ---------------------------------------------------------------------------- data


@dataclass
class Question:
    index: int
    sample: str
    category: int
    text: str
    evidence: set[int]
    vector: Matrix


@dataclass
class Conversation:
    sample: str
    turns: list[Turn]
    session_of: Matrix  # session number per turn
    position: Matrix  # index inside its session
    previous: Matrix  # index of the turn before in the session, -1 at the start
    following: Matrix  # index of the turn after, -1 at the end
    own: Matrix  # own vectors (n x d)
    derivatives: dict[str, tuple[Matrix, Matrix]]  # kind -> (owner indices, vectors)
    terms: list[list[str]]  # document_terms(search_text)
    bm25: Bm25Index
    vectors: Vectors
    questions: list[Question] = field(default_factory=list)
    cache: dict[Any, Any] = field(default_factory=dict)
    owns: dict[str, Matrix] = field(default_factory=dict)  # own-vector kind -> vectors


def build(
    data: Path, vectors: Vectors, kinds: Sequence[str], spans: SpanVectors | None = None
) -> list[Conversation]:
    turns_by_sample, questions = load(data, None)
    texts: list[str] = [q["question"] for q in questions]
    per_kind: dict[str, dict[str, list[tuple[int, str]]]] = {}
    per_span: dict[str, dict[str, list[tuple[int, SpanRequest]]]] = {}
    for sample, turns in turns_by_sample.items():
        texts += [search_text(t) for t in turns]
        sessions: dict[int, list[Turn]] = defaultdict(list)
        for turn in turns:
            sessions[turn.session].append(turn)
        position = {t.dia_id: i for s in sessions.values() for i, t in enumerate(s)}
        for kind in kinds:
            if kind in SPAN_KINDS or kind == "window-own":
                make = window_own if kind == "window-own" else SPAN_KINDS[kind]
                span_rows = per_span.setdefault(kind, {}).setdefault(sample, [])
                for i, turn in enumerate(turns):
                    for request in make(turn, sessions[turn.session], position[turn.dia_id]):
                        span_rows.append((i, request))
                continue
            rows = per_kind.setdefault(kind, {}).setdefault(sample, [])
            for i, turn in enumerate(turns):
                for text in DERIVATIVES[kind](turn, sessions[turn.session], position[turn.dia_id]):
                    rows.append((i, text))
                    texts.append(text)
    vectors.ensure(texts)
    if per_span:
        assert spans is not None, "span kinds need SpanVectors"
        spans.of([r for kind in per_span.values() for rows in kind.values() for _, r in rows])
    out = []
    for sample, turns in turns_by_sample.items():
        n = len(turns)
        ids = {t.dia_id: i for i, t in enumerate(turns)}
        session_of = np.asarray([t.session for t in turns])
        position = np.zeros(n, dtype=np.int64)
        previous = np.full(n, -1)
        following = np.full(n, -1)
        for i in range(n):
            if i > 0 and session_of[i - 1] == session_of[i]:
                previous[i] = i - 1
                following[i - 1] = i
                position[i] = position[i - 1] + 1
        derivatives = {}
        owns = {"own": vectors.of([search_text(t) for t in turns])}
        for kind in kinds:
            if kind in per_span:
                span_rows = per_span[kind][sample]
                owners = np.asarray([r[0] for r in span_rows], dtype=np.int64)
                matrix = spans.of([r[1] for r in span_rows]) if span_rows else np.zeros((0, 384))
                if kind == "window-own":
                    owns[kind] = matrix
                else:
                    derivatives[kind] = (owners, matrix)
                continue
            rows = per_kind[kind][sample]
            owners = np.asarray([r[0] for r in rows], dtype=np.int64)
            derivatives[kind] = (owners, vectors.of([r[1] for r in rows]))
        terms = [document_terms(search_text(t)) for t in turns]
        conversation = Conversation(
            sample,
            turns,
            session_of,
            position,
            previous,
            following,
            owns["own"],
            derivatives,
            terms,
            Bm25Index(terms),
            vectors,
            owns=owns,
        )
        for q in questions:
            if q["sample_id"] == sample:
                conversation.questions.append(
                    Question(
                        len(conversation.questions),
                        sample,
                        q["category"],
                        q["question"],
                        {ids[e] for e in q["evidence"]},
                        vectors.of([q["question"]])[0],
                    )
                )
        out.append(conversation)
    return out


# ---------------------------------------------------------------------------- the pipeline


@dataclass(frozen=True)
class Config:
    """One variant of the search pipeline; the defaults are memmachine's defaults."""

    candidates: int = 60  # max(min_candidates 30, top_k 20 * candidates_per_result 3)
    fusion: str = "rrf"  # "rrf" | "score" (min-max per list) | "z" | "max"
    rrf_k: float = 10
    vector_weight: float = 1.0
    fulltext_weight: float = 1.0
    kinds: tuple[str, ...] = ("window-sentence",)  # derivative vectors dense search uses
    window_mix: float = 0.0  # blend window vectors with the turn's own vector
    window_weight: float = 0.995  # a window vector's cosine counts this much (own: 1)
    own: str = "window-own"  # "own" embeds the search text; "window-own" pools it in the window
    window_max_words: int = 0  # window vectors only for turns of at most this many words
    lexical_context: int = 1  # words of this many turns before are indexed with a turn
    lexical_after: int = 0  # ... and of this many turns after (not in the core)
    context_full: bool = False  # context words counted with every repeat, own ones too
    analyser: str = "snowball"  # the core's; "s-stem" = the previous one; "porter"; "dual"
    stem_weight: float = 1.0  # "dual": weight of the stem terms against the exact ones
    speaker_boost: float = 0.5
    time_boost: float = 1.0
    when_boost: float = 1.0
    neighbour_weight: float = 0.3
    second_neighbour_weight: float = 0.2
    neighbour_candidates: int = 20
    # --- ideas that are not in the core
    session_weight: float = 0.0  # lift turns of sessions with strong hits
    session_top: int = 3  # how many of a session's best hits make its evidence
    session_sources: int = 20  # how many fused hits vote for sessions
    prf_terms: int = 0  # RM3-style: expand the lexical query with top terms of the top docs
    prf_docs: int = 5
    prf_weight: float = 0.3
    diversity: float = 0.0  # penalise a session's later hits (for multi-hop)
    strip_time_lexical: bool = False  # drop the time expressions time ranges read
    strip_time_dense: bool = False  # embed the question without them


def dense_scores(
    conv: Conversation,
    q: Question,
    kinds: tuple[str, ...],
    mix: float = 0.0,
    window_weight: float = 1.0,
    own: str = "own",
    window_max_words: int = 0,
) -> Matrix:
    """Per turn, the best cosine of its own vector and its derivative vectors of ``kinds``;
    window vectors (every kind but ``sentence``) are first blended with the turn's own
    vector, ``normalise((1 - mix) * window + mix * own)``, and their cosine counts
    ``window_weight`` times."""
    key = ("dense", q.index, kinds, mix, window_weight, own, window_max_words)
    if key not in conv.cache:
        best = conv.owns.get(own, conv.own) @ q.vector
        for kind in kinds:
            owners, vectors = conv.derivatives[kind]
            if not len(owners):
                continue
            if mix and "sentence" not in kind:
                vectors = (1 - mix) * vectors + mix * conv.own[owners]
                vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
            weight = 1.0 if "sentence" in kind else window_weight
            if window_max_words and "sentence" not in kind:
                words = np.asarray([len(conv.turns[o].content.split()) for o in owners])
                short = words <= window_max_words
                owners, vectors = owners[short], vectors[short]
            np.maximum.at(best, owners, weight * (vectors @ q.vector))
        conv.cache[key] = best
    result: Matrix = conv.cache[key]
    return result


def _s_stem(term: str) -> str:
    """Harman's S-stemmer, the analyser before Snowball (for the ablation)."""
    if len(term) <= 3 or not term.isascii() or not term.isalpha() or not term.endswith("s"):
        return term
    if term.endswith("ies") and not term.endswith(("eies", "aies")):
        return term[:-3] + "y"
    if term.endswith("es") and not term.endswith(("aes", "ees", "oes")):
        return term[:-1]
    if term.endswith(("us", "ss")):
        return term
    return term[:-1]


def analyse(text: str, analyser: str) -> list[str]:
    """Terms of ``text``: ``snowball`` is the core's ``document_terms``; ``s-stem`` folds
    plurals only; ``porter`` is the original Porter stemmer; ``dual`` indexes each word's
    s-stem form and, marked, its Snowball stem."""
    if analyser == "snowball":
        return document_terms(text)
    tokens = TERM_PATTERN.findall(unicodedata.normalize("NFKC", text).casefold())
    kept = [t for t in tokens if len(t) <= MAX_TERM_CHARS and t not in STOPWORDS]
    plain = [_s_stem(t) for t in kept]
    if analyser == "s-stem":
        return plain
    import Stemmer

    if analyser == "porter":
        return Stemmer.Stemmer("porter").stemWords(kept)  # type: ignore[no-any-return]
    assert analyser == "dual", analyser
    return plain + ["~" + stem for stem in document_terms(text)]


def index_of(conv: Conversation, cfg: Config) -> tuple[Bm25Index, list[list[str]]]:
    key = ("index", cfg.analyser, cfg.lexical_context, cfg.lexical_after, cfg.context_full)
    if key not in conv.cache:
        terms = []
        for i, turn in enumerate(conv.turns):
            around = [turn.content for turn in _nearby(conv, i, cfg.lexical_context, -1)]
            around += [turn.content for turn in _nearby(conv, i, cfg.lexical_after, 1)]
            if cfg.context_full:
                own = analyse(search_text(turn), cfg.analyser)
                terms.append(own + analyse(" ".join(around), cfg.analyser))
                continue
            terms.append(analyse(indexed_text(search_text(turn), around), cfg.analyser))
        conv.cache[key] = (Bm25Index(terms), terms)
    result: tuple[Bm25Index, list[list[str]]] = conv.cache[key]
    return result


def _nearby(conv: Conversation, index: int, count: int, step: int) -> list[Turn]:
    """Up to ``count`` turns before (``step`` -1, oldest first) or after ``index`` in its
    session."""
    out = []
    links = conv.previous if step < 0 else conv.following
    at = index
    for _ in range(count):
        at = int(links[at])
        if at < 0:
            break
        out.append(conv.turns[at])
    return out[::-1] if step < 0 else out


def lexical_scores(conv: Conversation, q: Question, cfg: Config) -> Matrix:
    key = ("bm25", q.index, cfg.analyser, cfg.lexical_context, cfg.lexical_after, cfg.context_full)
    key += (cfg.prf_terms, cfg.prf_docs, cfg.prf_weight, cfg.strip_time_lexical, cfg.stem_weight)
    if key in conv.cache:
        cached: Matrix = conv.cache[key]
        return cached
    text = without_times(q.text, conv) if cfg.strip_time_lexical else q.text
    bm25, doc_terms = index_of(conv, cfg)
    terms = list(dict.fromkeys(analyse(text, cfg.analyser)))[: 2 * MAX_QUERY_TERMS]
    scores = bm25.scores(terms, [cfg.stem_weight if t[0] == "~" else 1.0 for t in terms])
    if cfg.prf_terms > 0 and scores.max() > 0:
        top = np.argsort(-scores, kind="stable")[: cfg.prf_docs]
        weight: dict[str, float] = defaultdict(float)
        for d in top:
            if scores[d] <= 0:
                continue
            length = len(doc_terms[d])
            for term in set(doc_terms[d]):
                weight[term] += doc_terms[d].count(term) / length * bm25.idf(term)
        extra = [t for t in sorted(weight, key=lambda t: -weight[t]) if t not in terms]
        extra = extra[: cfg.prf_terms]
        if extra:
            scores = scores + bm25.scores(extra, [cfg.prf_weight] * len(extra))
    conv.cache[key] = scores
    return scores


def top_by(scores: Matrix, k: int, tiebreak: Matrix | None = None) -> list[int]:
    """Indices of the ``k`` best positive... (dense: all) scores, best first."""
    if tiebreak is None:
        order = np.argsort(-scores, kind="stable")
    else:
        order = np.lexsort((-tiebreak, -scores))
    return [int(i) for i in order[:k]]


def without_times(text: str, conv: Conversation) -> str:
    """``text`` without the time expressions :func:`time_ranges` reads in it."""
    ranges = time_ranges(text, conv.turns[-1].timestamp)
    for span in ranges:
        text = text.replace(span.text, " ")
    return text


def search(conv: Conversation, q: Question, cfg: Config) -> list[int]:
    n = len(conv.turns)
    if cfg.strip_time_dense:
        stripped = without_times(q.text, conv)
        if stripped != q.text:
            q = replace(q, vector=conv.vectors.of([stripped])[0], index=-1 - q.index)
    dense = dense_scores(
        conv, q, cfg.kinds, cfg.window_mix, cfg.window_weight, cfg.own, cfg.window_max_words
    )
    dense_list = top_by(dense, cfg.candidates)
    lexical = lexical_scores(conv, q, cfg)
    stamps = np.arange(n, dtype=np.float64)  # timestamps increase with the index
    lex_list = [i for i in top_by(lexical, cfg.candidates, stamps) if lexical[i] > 0]
    scores: dict[int, float] = {}
    if cfg.fusion == "rrf":
        best = (cfg.vector_weight + cfg.fulltext_weight) / (cfg.rrf_k + 1)
        for weight, ranked in ((cfg.vector_weight, dense_list), (cfg.fulltext_weight, lex_list)):
            for rank, i in enumerate(ranked, 1):
                scores[i] = scores.get(i, 0.0) + weight / (cfg.rrf_k + rank) / best
        order = sorted(scores, key=lambda i: -scores[i])
        scores = {i: scores[i] for i in order}
    else:
        for weight, ranked, raw in (
            (cfg.vector_weight, dense_list, dense),
            (cfg.fulltext_weight, lex_list, lexical),
        ):
            if not ranked:
                continue
            values = raw[ranked]
            low, high = values.min(), values.max()
            if cfg.fusion == "max" or len(ranked) < cfg.candidates:
                low = min(low, 0.0)  # a short list holds all that signal found
            elif cfg.fusion == "z":
                low, high = values.mean() - 2 * values.std(), values.mean() + 2 * values.std()
            for i, v in zip(ranked, values, strict=True):
                scaled = (v - low) / (high - low) if high > low else 1.0
                scores[i] = scores.get(i, 0.0) + weight * scaled
        order = sorted(scores, key=lambda i: -scores[i])
        scores = {i: scores[i] / (cfg.vector_weight + cfg.fulltext_weight) for i in order}

    # boosts
    if cfg.time_boost > 0 and scores:
        newest = max(conv.turns[i].timestamp for i in scores)
        anchor = min(newest, datetime.now(UTC))
        ranges = time_ranges(q.text, anchor, slack=timedelta(days=0))
        if ranges:
            for i in scores:
                if any(conv.turns[i].timestamp in span for span in ranges):
                    scores[i] *= 1 + cfg.time_boost
    if cfg.speaker_boost > 0:
        named = named_speakers(q.text, {t.speaker for t in conv.turns})
        for i in scores:
            if conv.turns[i].speaker in named:
                scores[i] *= 1 + cfg.speaker_boost
    if cfg.when_boost > 0 and asks_when(q.text):
        for i in scores:
            if mentions_time(conv.turns[i].content):
                scores[i] *= 1 + cfg.when_boost

    if cfg.session_weight > 0 and scores:
        voters = sorted(scores, key=lambda i: -scores[i])[: cfg.session_sources]
        per: dict[int, list[float]] = defaultdict(list)
        for i in voters:
            per[int(conv.session_of[i])].append(scores[i])
        strength = {s: sum(sorted(v, reverse=True)[: cfg.session_top]) for s, v in per.items()}
        top = max(strength.values())
        for i in scores:
            s = int(conv.session_of[i])
            scores[i] *= 1 + cfg.session_weight * strength.get(s, 0.0) / top

    # graph neighbourhood: shares to the turns one and two away in the session
    if max(cfg.neighbour_weight, cfg.second_neighbour_weight) > 0 and scores:
        sources = sorted(scores, key=lambda i: -scores[i])[: cfg.neighbour_candidates]
        shares: dict[int, float] = {}
        for i in sources:
            for links in (conv.previous, conv.following):
                j = int(links[i])
                if j < 0:
                    continue
                two = int(links[j])
                for k, weight in ((j, cfg.neighbour_weight), (two, cfg.second_neighbour_weight)):
                    share = weight * scores[i]
                    if k >= 0 and share > shares.get(k, 0.0):
                        shares[k] = share
        for j, share in shares.items():
            scores[j] = scores.get(j, 0.0) + share

    order = sorted(scores, key=lambda i: -scores[i])
    if cfg.diversity > 0:
        seen: dict[int, int] = defaultdict(int)
        adjusted = {}
        for i in order:
            s = int(conv.session_of[i])
            adjusted[i] = scores[i] / (1 + cfg.diversity * seen[s])
            seen[s] += 1
        order = sorted(order, key=lambda i: -adjusted[i])
    return order[:TOP]


# ---------------------------------------------------------------------------- scoring


@dataclass
class Result:
    name: str
    any: dict[int, float]  # any@K overall
    all10: float
    by_category: dict[int, float]  # any@10
    by_conversation: dict[str, tuple[int, int]]  # any@10 hits, questions
    hits: dict[tuple[str, int], bool]  # (sample, question) -> any@10


def evaluate(name: str, conversations: Sequence[Conversation], cfg: Config) -> Result:
    any_k: dict[int, int] = defaultdict(int)
    all10 = 0
    cat_hits: dict[int, int] = defaultdict(int)
    cat_n: dict[int, int] = defaultdict(int)
    by_conv: dict[str, tuple[int, int]] = {}
    hits: dict[tuple[str, int], bool] = {}
    total = 0
    for conv in conversations:
        found = 0
        for q in conv.questions:
            ranked = search(conv, q, cfg)
            for k in (1, 5, 10, 20):
                any_k[k] += bool(q.evidence & set(ranked[:k]))
            hit = bool(q.evidence & set(ranked[:10]))
            all10 += q.evidence <= set(ranked[:10])
            cat_hits[q.category] += hit
            cat_n[q.category] += 1
            hits[conv.sample, q.index] = hit
            found += hit
        by_conv[conv.sample] = (found, len(conv.questions))
        total += len(conv.questions)
    return Result(
        name,
        {k: v / total for k, v in any_k.items()},
        all10 / total,
        {c: cat_hits[c] / cat_n[c] for c in cat_n},
        by_conv,
        hits,
    )


def report(results: Sequence[Result]) -> str:
    base = results[0]
    lines = [
        "variant                          any@1 any@5 any@10 any@20 all@10   c1    c2    c3"
        "    c4   Δ any@10 | Δ questions per conversation (up/down)"
    ]
    for r in results:
        deltas = [
            r.by_conversation[s][0] - base.by_conversation[s][0] for s in base.by_conversation
        ]
        ups = sum(d > 0 for d in deltas)
        downs = sum(d < 0 for d in deltas)
        cats = " ".join(f"{r.by_category.get(c, 0):.3f}" for c in CATEGORIES)
        lines.append(
            f"{r.name[:32]:<32} {r.any[1]:.3f} {r.any[5]:.3f} {r.any[10]:.3f}  {r.any[20]:.3f}"
            f"  {r.all10:.3f} {cats} {r.any[10] - base.any[10]:+.3f} | "
            + " ".join(f"{d:+d}" for d in deltas)
            + f" ({ups}/{downs})"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- variants

DEFAULTS = Config()
#: The context window embedded as a text: one more derivative vector, counting 0.995.
TEXTS = replace(DEFAULTS, own="own", kinds=("sentence", "context"))
#: The defaults of issue 6's second round: no context windows, neighbour weight 0.5
#: (any@10 0.832 in bench/RESULTS.md).
ROUND_TWO = replace(
    TEXTS, kinds=("sentence",), window_weight=1.0, neighbour_weight=0.5, speaker_boost=0.0
)
#: The defaults before issue 6's second round (any@10 0.767 in bench/RESULTS.md).
PREVIOUS = replace(
    ROUND_TWO,
    lexical_context=0,
    analyser="s-stem",
    time_boost=0.5,
    when_boost=0.0,
    second_neighbour_weight=0.0,
)
VARIANTS: dict[str, Config] = {
    "defaults": DEFAULTS,
    "window embedded as a text (x0.995)": TEXTS,
    "round-two defaults": ROUND_TWO,
    "previous defaults": PREVIOUS,
    "plain rrf (all stages off)": replace(PREVIOUS, kinds=(), time_boost=0.0, neighbour_weight=0.0),
    # each stage of the defaults switched off
    "- context windows": replace(TEXTS, kinds=("sentence",)),
    "- sentence vectors": replace(DEFAULTS, kinds=()),
    "- lexical context": replace(DEFAULTS, lexical_context=0),
    "- snowball (s-stem)": replace(DEFAULTS, analyser="s-stem"),
    "- second neighbour": replace(DEFAULTS, second_neighbour_weight=0.0),
    "- graph neighbourhood": replace(DEFAULTS, neighbour_weight=0.0, second_neighbour_weight=0.0),
    "- when boost": replace(DEFAULTS, when_boost=0.0),
    "- time ranges": replace(DEFAULTS, time_boost=0.0),
    # the settings chosen, moved one step
    "neighbour 0.5": replace(DEFAULTS, neighbour_weight=0.5),
    "time boost 0.5": replace(DEFAULTS, time_boost=0.5),
    **{
        f"window as a text, weight {w}": replace(TEXTS, window_weight=w)
        for w in (1.0, 0.99, 0.97, 0.9)
    },
    "+ score fusion": replace(DEFAULTS, fusion="score"),
    **{f"speaker boost {b}": replace(DEFAULTS, speaker_boost=b) for b in (0.0, 0.25, 1.0)},
    # other ways to pool from one or two runs per turn
    "pooled sentences, no window": replace(DEFAULTS, own="own", kinds=("pooled-sentence",)),
    "pooled sentences + window as a text": replace(TEXTS, kinds=("pooled-sentence", "context")),
    "one window run: own + sentences + window": replace(
        DEFAULTS, kinds=("window-sentence", "window-whole")
    ),
    "own run + window run (sentences + window)": replace(
        DEFAULTS, own="own", kinds=("window-sentence", "window-whole")
    ),
    **{
        f"window as a text only for turns of <= {words} words": replace(
            TEXTS, window_max_words=words
        )
        for words in (8, 16, 32)
    },
    # ideas that did not make it
    "+ window (text) of the previous turn only": replace(TEXTS, kinds=("sentence", "previous")),
    "+ windows (text) before and after": replace(TEXTS, kinds=("sentence", "context", "next")),
    "window (text) around (prev+next) instead": replace(TEXTS, kinds=("sentence", "around")),
    "window (text) blended with own .25": replace(TEXTS, window_mix=0.25),
    "lexical context 2 turns": replace(DEFAULTS, lexical_context=2),
    "lexical context words in full": replace(DEFAULTS, context_full=True),
    "+ lexical next turn": replace(DEFAULTS, lexical_after=1),
    "porter stemmer": replace(DEFAULTS, analyser="porter"),
    "exact + stem terms (dual)": replace(DEFAULTS, analyser="dual"),
    "session evidence 0.3": replace(DEFAULTS, session_weight=0.3),
    "rm3 feedback 10 terms": replace(DEFAULTS, prf_terms=10),
    "session diversity 0.3": replace(DEFAULTS, diversity=0.3),
    "fusion z-score": replace(DEFAULTS, fusion="z"),
    "fusion score/max": replace(DEFAULTS, fusion="max"),
    "fulltext weight 1.5": replace(DEFAULTS, fulltext_weight=1.5),
    "vector weight 1.5": replace(DEFAULTS, vector_weight=1.5),
    "candidates 100": replace(DEFAULTS, candidates=100),
    "strip time words (lexical)": replace(DEFAULTS, strip_time_lexical=True),
    "strip time words (dense)": replace(DEFAULTS, strip_time_dense=True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--model", type=Path, default=REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2"
    )
    parser.add_argument("--onnx-file", default="onnx/model.onnx")
    parser.add_argument("--variant", action="append", help="named variant(s); default: all")
    parser.add_argument("--split", action="store_true", help="also score on 0-2 and 3-5")
    parser.add_argument(
        "--kinds",
        default=",".join([*DERIVATIVES, *SPAN_KINDS, "window-own"]),
        help="derivatives to embed",
    )
    args = parser.parse_args()
    vectors = Vectors(args.model, args.onnx_file)
    began = time.monotonic()
    spans = SpanVectors(args.model, args.onnx_file)
    conversations = build(args.data, vectors, tuple(args.kinds.split(",")), spans)
    vectors.ensure(without_times(q.text, c) for c in conversations for q in c.questions)
    sys.stderr.write(f"built in {time.monotonic() - began:.1f}s\n")
    names = args.variant or list(VARIANTS)
    run(conversations, {n: VARIANTS[n] for n in names}, args.split)


def run(conversations: Sequence[Conversation], variants: dict[str, Config], split: bool) -> None:
    groups = [("all six", conversations)]
    if split:
        groups += [("0-2", conversations[:3]), ("3-5", conversations[3:])]
    for label, group in groups:
        began = time.process_time()
        results = [evaluate(name, group, cfg) for name, cfg in variants.items()]
        print(f"\n== {label} ({time.process_time() - began:.1f}s CPU)")
        print(report(results))


if __name__ == "__main__":
    main()
