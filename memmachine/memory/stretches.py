"""Consecutive messages of a session embedded from one model run (a *stretch*).

Read inside its context window, each message costs a model run over itself and the messages
before it, and consecutive messages' windows overlap, so the model reads each token about
``context_window + 1`` times. A stretch is one run over as many consecutive messages of one
call as fit ``RetrievalSettings.context_stretch_tokens`` (after up to ``context_window``
messages before the first, as context): each message's own vector and its sentences'
vectors are pooled from that run's token states over the date and the message's own
tokens, as :func:`~memmachine.memory.embedding.embed_records` pools them from a message's
window. A message's tokens then also see the messages after it in the stretch. Its LoCoMo
recall and CPU cost against the window runs are in bench/RESULTS.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memmachine.config import RetrievalSettings
from memmachine.models import EpisodeRecord
from memmachine.ports import SpanEmbedder, SpanSet
from memmachine.retrieval.derivatives import sentence_spans
from memmachine.retrieval.text import Said, day_text

__all__ = ["Stretch", "chains", "embed_in_stretches", "plan_stretches", "set_pooled"]


@dataclass
class Stretch:
    """One run's text (``"<date> "`` then one ``"<speaker>: <content>"`` line per message),
    the records whose vectors it yields (``members``) and, per member, its span sets."""

    text: str
    members: list[int] = field(default_factory=list)
    spans: list[list[SpanSet]] = field(default_factory=list)


def _said(record: EpisodeRecord) -> Said:
    return (record.producer or record.role, record.content)


def _day(record: EpisodeRecord) -> str:
    return day_text(record.timestamp)


def chains(records: Sequence[EpisodeRecord], contexts: Sequence[Sequence[Said]]) -> list[list[int]]:
    """Runs of consecutive records that follow one another in one session on one day: record
    ``i + 1`` continues record ``i``'s chain when its context ends with record ``i`` and,
    before that, holds what record ``i``'s context holds (as far as the shorter reaches), and
    both carry the same date. Anything else (another session, a gap, another day) starts a
    new chain, so no run ever mixes sessions."""
    out: list[list[int]] = []
    for index, record in enumerate(records):
        if index and out:
            prev = records[index - 1]
            mine, theirs = list(contexts[index]), list(contexts[index - 1])
            reach = min(len(mine) - 1, len(theirs))
            follows = (
                bool(mine)
                and mine[-1] == _said(prev)
                and mine[len(mine) - 1 - reach : -1] == theirs[len(theirs) - reach :]
                and _day(prev) == _day(record)
            )
            if follows:
                out[-1].append(index)
                continue
        out.append([index])
    return out


def plan_stretches(
    records: Sequence[EpisodeRecord],
    contexts: Sequence[Sequence[Said]],
    tuning: RetrievalSettings,
    *,
    tokens: dict[str, int],
    specials: int,
    max_tokens: int,
) -> tuple[list[Stretch], list[int]]:
    """The stretches of ``records`` and the positions of the records left to embed as texts
    (a message longer than the model's window, or whose sentences cannot be located).
    ``tokens`` maps each date and each ``"<speaker>: <content>"`` line to its token count
    without special tokens (``specials``). A stretch opens with as many of the
    ``context_window`` messages before its first member as fit (newest kept), then takes
    members while the whole stays within ``context_stretch_tokens`` (and ``max_tokens``)."""
    budget = min(tuning.context_stretch_tokens, max_tokens)
    stretches: list[Stretch] = []
    left: list[int] = []
    for chain in chains(records, contexts):
        day = _day(records[chain[0]])
        position = 0
        while position < len(chain):
            first = records[chain[position]]
            own = specials + tokens[day] + tokens[_line(_said(first))]
            if own > max_tokens or (
                tuning.sentence_derivatives and sentence_spans(first.content) is None
            ):
                left.append(chain[position])
                position += 1
                continue
            lines: list[str] = []
            total = own
            window = list(contexts[chain[position]])[-tuning.context_window :]
            for said in reversed(window):
                extra = tokens[_line(said)]
                if total + extra > max_tokens:
                    break
                lines.insert(0, _line(said))
                total += extra
            members = [chain[position]]
            position += 1
            while position < len(chain):
                record = records[chain[position]]
                extra = tokens[_line(_said(record))]
                if total + extra > budget or (
                    tuning.sentence_derivatives and sentence_spans(record.content) is None
                ):
                    break
                members.append(chain[position])
                total += extra
                position += 1
            stretches.append(_layout(day, lines, [records[i] for i in members], members, tuning))
    return stretches, sorted(left)


def _line(said: Said) -> str:
    return f"{said[0]}: {said[1]}"


def _layout(
    day: str,
    context: list[str],
    members: list[EpisodeRecord],
    positions: list[int],
    tuning: RetrievalSettings,
) -> Stretch:
    """The stretch's text and, per member, its own span set (the date and its line) and,
    with ``sentence_derivatives``, one per sentence of a multi-sentence message (the date,
    the speaker and the sentence)."""
    text = f"{day} " + "".join(f"{line}\n" for line in context)
    stretch = Stretch("", positions)
    date: tuple[int, int] = (0, len(day))
    for record in members:
        speaker, content = _said(record)
        start = len(text)
        content_start = start + len(speaker) + 2
        text += f"{speaker}: {content}"
        sets: list[SpanSet] = [[date, (start, len(text))]]
        sentences = sentence_spans(content) if tuning.sentence_derivatives else []
        for low, high in sentences or []:
            sets.append([date, (start, content_start), (content_start + low, content_start + high)])
        stretch.spans.append(sets)
        text += "\n"
    stretch.text = text[:-1]
    return stretch


async def embed_in_stretches(
    embedder: SpanEmbedder,
    records: Sequence[EpisodeRecord],
    contexts: Sequence[Sequence[Said]],
    tuning: RetrievalSettings,
) -> list[int]:
    """Set the ``embedding`` and sentence vectors (weight 1.0) of each record a stretch
    holds (:func:`plan_stretches`); the positions of the records left to embed as texts."""
    days = {_day(record) for record in records}
    lines = {_line(_said(record)) for record in records}
    lines |= {_line(said) for context in contexts for said in context[-tuning.context_window :]}
    keys = sorted(days | lines)
    counts = await embedder.count_tokens(["", *keys])
    specials = counts[0]
    tokens = {key: count - specials for key, count in zip(keys, counts[1:], strict=True)}
    stretches, left = plan_stretches(
        records, contexts, tuning, tokens=tokens, specials=specials, max_tokens=embedder.max_tokens
    )
    pooled = await embedder.embed_spans(
        [stretch.text for stretch in stretches],
        [[sets for member in stretch.spans for sets in member] for stretch in stretches],
    )
    for stretch, vectors in zip(stretches, pooled, strict=True):
        at = 0
        for index, sets in zip(stretch.members, stretch.spans, strict=True):
            if not set_pooled(records[index], vectors[at : at + len(sets)]):
                left.append(index)
            at += len(sets)
    return sorted(left)


def set_pooled(record: EpisodeRecord, vectors: Sequence[list[float] | None]) -> bool:
    """Give ``record`` its own vector (the first) and its sentences' (the rest, weight 1.0,
    those pooled at all); False, and nothing set, when the own vector could not be pooled."""
    own, *parts = vectors
    if own is None:
        return False
    record.embedding = own
    for vector in parts:
        if vector is not None:
            record.derivative_embeddings.append(vector)
            record.derivative_weights.append(1.0)
    return True
