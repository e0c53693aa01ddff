"""Several consecutive messages embedded from one model run (``context_stretch_tokens``):
each message's vectors come from its own tokens of that run, a run never mixes sessions or
days, and a budget too small for two messages gives each message its window run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from memmachine.adapters.onnx.onnx_embedder import OnnxEmbedder
from memmachine.config import RetrievalSettings
from memmachine.memory.embedding import embed_records
from memmachine.memory.stretches import plan_stretches
from memmachine.models import EpisodeRecord
from memmachine.ports import SpanSet
from memmachine.retrieval.derivatives import split_sentences
from memmachine.retrieval.text import Said, window_text

DAY = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
SESSION_A: list[Said] = [
    ("Caroline", "I went to a LGBTQ support group yesterday. It was so powerful."),
    ("Melanie", "Wow, that's cool! What happened that was so awesome?"),
    ("Caroline", "The transgender stories were so inspiring! I was so happy and thankful."),
    ("Melanie", "That sounds great. What are you thinking of doing next?"),
]
SESSION_B: list[Said] = [
    ("Jon", "I lost my job as a banker. I want to open a dance studio."),
    ("Gina", "Sorry about your job, Jon. Dance is a great way to express yourself!"),
    ("Jon", "Thanks Gina. What are you up to lately?"),
]
STRETCH = RetrievalSettings(context_stretch_tokens=256)


def session(
    said: Sequence[Said], *, day: datetime = DAY, before: Sequence[Said] = ()
) -> tuple[list[EpisodeRecord], list[list[Said]]]:
    """Records and contexts as ``add_messages`` builds them for one call."""
    records, contexts, seen = [], [], list(before)
    for index, (speaker, content) in enumerate(said):
        records.append(
            EpisodeRecord(
                id=f"e{index}",
                role="user",
                producer=speaker,
                content=content,
                timestamp=day + timedelta(seconds=index),
                metadata={},
                search_text=content,
            )
        )
        contexts.append(list(seen))
        seen.append((speaker, content))
    return records, contexts


class Spy:
    """The texts each ``embed_spans`` call ran."""

    def __init__(self, embedder: OnnxEmbedder) -> None:
        self.runs: list[str] = []
        self._embed_spans = embedder.embed_spans

        async def embed_spans(texts: Sequence[str], spans: Sequence[Sequence[SpanSet]]) -> Any:
            self.runs += texts
            return await self._embed_spans(texts, spans)

        embedder.embed_spans = embed_spans  # type: ignore[method-assign]


@pytest.fixture
async def embedder(model_dir: Path) -> AsyncIterator[OnnxEmbedder]:
    local = OnnxEmbedder(model_dir)
    await local.start()
    yield local
    await local.close()


def pooled_by_hand(model_dir: Path, text: str, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """Run the model on ``text`` and average the special tokens and the tokens inside
    ``ranges``, then normalise: what a message's vector must be, computed without the
    embedder."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    encoding = tokenizer.encode(text)
    session = ort.InferenceSession(str(model_dir / "onnx" / "model.onnx"))
    feeds = {
        "input_ids": np.asarray([encoding.ids], dtype=np.int64),
        "attention_mask": np.asarray([encoding.attention_mask], dtype=np.int64),
        "token_type_ids": np.asarray([encoding.type_ids], dtype=np.int64),
    }
    names = {item.name for item in session.get_inputs()}
    states = session.run(None, {k: v for k, v in feeds.items() if k in names})[0][0]
    keep = [
        bool(special) or (any(low <= start and end <= high for low, high in ranges) and end > start)
        for special, (start, end) in zip(
            encoding.special_tokens_mask, encoding.offsets, strict=True
        )
    ]
    vector = states[np.asarray(keep)].mean(axis=0)
    return vector / np.linalg.norm(vector)


async def test_each_message_is_pooled_from_its_own_tokens_of_one_shared_run(
    embedder: OnnxEmbedder, model_dir: Path
) -> None:
    records, contexts = session(SESSION_A)
    spy = Spy(embedder)
    await embed_records(embedder, records, contexts, STRETCH)
    # the four messages fit one run: the window text of all four
    text = window_text(SESSION_A, timestamp=DAY)
    assert spy.runs == [text]
    day = (0, len("8 May 2023"))
    for record, (speaker, content) in zip(records, SESSION_A, strict=True):
        start = text.index(f"{speaker}: {content}")
        own = pooled_by_hand(
            model_dir, text, [day, (start, start + len(speaker) + 2 + len(content))]
        )
        assert np.asarray(record.embedding) == pytest.approx(own, abs=1e-5)
        # each sentence pooled over the date, the speaker and the sentence
        first = split_sentences(content)[0]
        at = text.index(first, start)
        sentence = pooled_by_hand(
            model_dir, text, [day, (start, start + len(speaker) + 2), (at, at + len(first))]
        )
        assert np.asarray(record.derivative_embeddings[0]) == pytest.approx(sentence, abs=1e-5)
        assert record.derivative_weights == [1.0] * len(record.derivative_embeddings)
    # a message is read beside the others: not what it gives alone
    alone, _ = session(SESSION_A[1:2])
    await embed_records(embedder, alone, [[]], RetrievalSettings(context_window=0))
    assert float(np.dot(records[1].embedding, alone[0].embedding)) < 0.99


async def test_a_run_never_mixes_sessions_and_batch_mates_change_nothing(
    embedder: OnnxEmbedder,
) -> None:
    a, a_contexts = session(SESSION_A)
    b, b_contexts = session(SESSION_B, day=DAY + timedelta(days=3))
    spy = Spy(embedder)
    # both sessions in one call, as a caller batching several sessions would pass them
    await embed_records(embedder, [*a, *b], [*a_contexts, *b_contexts], STRETCH)
    assert len(spy.runs) == 2
    assert all(not ("Caroline" in run and "Jon" in run) for run in spy.runs)
    for said, contexts in ((SESSION_A, a_contexts), (SESSION_B, b_contexts)):
        alone, _ = session(said, day=DAY if said is SESSION_A else DAY + timedelta(days=3))
        await embed_records(embedder, alone, contexts, STRETCH)
        mixed = a if said is SESSION_A else b
        for one, other in zip(alone, mixed, strict=True):
            assert np.asarray(one.embedding) == pytest.approx(other.embedding, abs=1e-5)
            assert len(one.derivative_embeddings) == len(other.derivative_embeddings)
            for x, y in zip(one.derivative_embeddings, other.derivative_embeddings, strict=True):
                assert np.asarray(x) == pytest.approx(y, abs=1e-5)


async def test_the_same_session_on_two_days_is_two_runs(embedder: OnnxEmbedder) -> None:
    records, contexts = session(SESSION_A)
    records[2].timestamp = DAY + timedelta(days=1)
    records[3].timestamp = DAY + timedelta(days=1)
    spy = Spy(embedder)
    await embed_records(embedder, records, contexts, STRETCH)
    # the second run opens with the two messages before it as context, under its own date
    assert spy.runs == [
        window_text(SESSION_A[:2], timestamp=DAY),
        window_text(SESSION_A, timestamp=DAY + timedelta(days=1)),
    ]


async def test_a_budget_for_one_message_gives_each_its_window_run(
    embedder: OnnxEmbedder,
) -> None:
    before = [("Melanie", "Hey Caroline, how have you been?")]
    windows, contexts = session(SESSION_A, before=before)
    await embed_records(embedder, windows, contexts, RetrievalSettings(context_stretch_tokens=0))
    one, contexts = session(SESSION_A, before=before)
    await embed_records(embedder, one, contexts, RetrievalSettings(context_stretch_tokens=1))
    for window, single in zip(windows, one, strict=True):
        assert np.asarray(single.embedding) == pytest.approx(window.embedding, abs=1e-5)
        assert len(single.derivative_embeddings) == len(window.derivative_embeddings)


def test_the_plan_packs_messages_up_to_the_budget_and_leaves_out_what_cannot_fit() -> None:
    said = [("A", "one two three"), ("B", "four five six"), ("A", "seven"), ("B", "x " * 300)]
    records, contexts = session(said)
    # whitespace words as tokens, 2 special tokens
    tokens = {f"{s}: {c}": len(f"{s}: {c}".split()) for s, c in said}
    tokens["8 May 2023"] = 3
    plan, left = plan_stretches(
        records,
        contexts,
        STRETCH.model_copy(update={"context_stretch_tokens": 13}),
        tokens=tokens,
        specials=2,
        max_tokens=100,
    )
    # 2 + 3 + 4 + 4 = 13: two messages; the third opens a run with both before it as context
    assert [stretch.members for stretch in plan] == [[0, 1], [2]]
    assert plan[1].text == "8 May 2023 A: one two three\nB: four five six\nA: seven"
    # the 300-word message is longer than the model reads: embedded as texts instead
    assert left == [3]
    for stretch in plan:
        for member, sets in zip(stretch.members, stretch.spans, strict=True):
            speaker, content = said[member]
            (day, line), *_ = sets
            assert stretch.text[slice(*day)] == "8 May 2023"
            assert stretch.text[slice(*line)] == f"{speaker}: {content}"


def test_the_stretch_budget_is_a_setting_and_an_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert RetrievalSettings().context_stretch_tokens == 200
    monkeypatch.setenv("MEMMACHINE_RETRIEVAL_CONTEXT_STRETCH_TOKENS", "0")
    assert RetrievalSettings().context_stretch_tokens == 0
