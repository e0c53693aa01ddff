"""How an episode is embedded when it is written: its own vector, its sentences' vectors and
its context window (the messages before it in its session), per
:class:`~memmachine.config.RetrievalSettings`."""

from __future__ import annotations

from collections.abc import Sequence

from memmachine.config import RetrievalSettings
from memmachine.memory.stretches import embed_in_stretches, set_pooled
from memmachine.models import EpisodeRecord
from memmachine.ports import Embedder, SpanEmbedder
from memmachine.retrieval.derivatives import sentence_spans, split_sentences
from memmachine.retrieval.text import Said, episode_search_text, window_layout, window_text

__all__ = ["embed_records", "search_text"]


def search_text(record: EpisodeRecord) -> str:
    """The text an episode's own vector is embedded from: ``"<date> <speaker>: <content>"``."""
    return episode_search_text(
        record.content, timestamp=record.timestamp, producer=record.producer, role=record.role
    )


async def embed_records(
    embedder: Embedder,
    records: Sequence[EpisodeRecord],
    contexts: Sequence[Sequence[Said]],
    tuning: RetrievalSettings,
) -> None:
    """Set each record's ``embedding`` and ``derivative_embeddings`` (with their weights),
    reading each message after up to ``tuning.context_window`` of the messages before it in
    its session (``contexts[i]``, oldest first): pooled from one run over that window when
    the embedder can (:func:`_embed_in_windows`; with ``context_stretch_tokens``, several
    consecutive messages per run: :func:`~memmachine.memory.stretches.embed_in_stretches`),
    else as separate texts (:func:`_embed_as_texts`)."""
    left = list(range(len(records)))
    if (
        tuning.context_window
        and tuning.context_pooling
        and isinstance(embedder, SpanEmbedder)
        and embedder.pools_spans
    ):
        run = embed_in_stretches if tuning.context_stretch_tokens else _embed_in_windows
        left = await run(embedder, records, contexts, tuning)
    if left:
        await _embed_as_texts(
            embedder, [records[i] for i in left], [contexts[i] for i in left], tuning
        )


async def _embed_in_windows(
    embedder: SpanEmbedder,
    records: Sequence[EpisodeRecord],
    contexts: Sequence[Sequence[Said]],
    tuning: RetrievalSettings,
) -> list[int]:
    """One model run per record over its window (:func:`window_layout`: the date, the
    messages before it, then its own ``"<speaker>: <content>"`` line), as many of the
    messages before as fit the model's window, newest kept. The record's own vector is
    pooled over the date and its own line; with ``sentence_derivatives`` each sentence of a
    multi-sentence message is pooled over the date, the speaker and the sentence (weight
    1.0). Returns the positions of the records left to embed as texts: a message too long
    for the model on its own, or whose sentences cannot be located."""
    owns = [search_text(record) for record in records]
    befores = [list(context)[-tuning.context_window :] for context in contexts]
    lines = [f"{speaker}: {content}" for before in befores for speaker, content in before]
    counts = await embedder.count_tokens(["", *owns, *lines])
    specials, own_counts, line_counts = counts[0], counts[1 : len(owns) + 1], counts[1:]
    line_tokens = iter(count - specials for count in line_counts[len(owns) :])
    texts: list[str] = []
    spans: list[list[list[tuple[int, int]]]] = []
    placed: list[int] = []
    left: list[int] = []
    for index, record in enumerate(records):
        before = befores[index]
        tokens = [next(line_tokens) for _ in before]
        total, kept = own_counts[index], 0
        for extra in reversed(tokens):
            if total + extra > embedder.max_tokens:
                break
            total, kept = total + extra, kept + 1
        sentences = sentence_spans(record.content) if tuning.sentence_derivatives else []
        if own_counts[index] > embedder.max_tokens or sentences is None:
            left.append(index)
            continue
        said = [*before[len(before) - kept :], (record.producer or record.role, record.content)]
        layout = window_layout(said, timestamp=record.timestamp)
        day, line, start = (0, layout.day_end), layout.line_start, layout.content_start
        sets = [[day, (line, len(layout.text))]]
        sets += [[day, (line, start), (start + a, start + b)] for a, b in sentences]
        texts.append(layout.text)
        spans.append(sets)
        placed.append(index)
    pooled = await embedder.embed_spans(texts, spans) if texts else []
    for index, vectors in zip(placed, pooled, strict=True):
        if not set_pooled(records[index], vectors):
            left.append(index)
    return sorted(left)


async def _embed_as_texts(
    embedder: Embedder,
    records: Sequence[EpisodeRecord],
    contexts: Sequence[Sequence[Said]],
    tuning: RetrievalSettings,
) -> None:
    """Each record's own text (``"<date> <speaker>: <content>"``), with
    ``sentence_derivatives`` each sentence of a multi-sentence message in the same
    ``"<date> <speaker>:"`` context (weight 1.0), and with ``context_window`` its window
    (:func:`window_text`; weight ``context_window_weight``), embedded as texts in one call."""
    texts = [search_text(record) for record in records]
    owners: list[int] = []
    weights: list[float] = []
    for index, record in enumerate(records):
        if tuning.sentence_derivatives:
            for sentence in split_sentences(record.content):
                texts.append(
                    episode_search_text(
                        sentence,
                        timestamp=record.timestamp,
                        producer=record.producer,
                        role=record.role,
                    )
                )
                owners.append(index)
                weights.append(1.0)
        before = list(contexts[index])[-tuning.context_window :] if tuning.context_window else []
        if before:
            speaker = record.producer or record.role
            said = [*before, (speaker, record.content)]
            texts.append(window_text(said, timestamp=record.timestamp))
            owners.append(index)
            weights.append(tuning.context_window_weight)
    vectors = await embedder.embed(texts)
    for record, vector in zip(records, vectors[: len(records)], strict=True):
        record.embedding = vector
    for index, vector, weight in zip(owners, vectors[len(records) :], weights, strict=True):
        records[index].derivative_embeddings.append(vector)
        records[index].derivative_weights.append(weight)
