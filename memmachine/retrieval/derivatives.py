"""Sentence-level derivatives of an episode: the pieces it is also searchable by.

A long message mixes several topics, and one embedding of the whole blurs them: "I went
camping with the kids. Also, I started a pottery class!" is a weak match for either topic.
Each sentence of a multi-sentence message is therefore embedded on its own (with the same
"<date> <speaker>:" context as the whole message), and dense search scores the episode by
the best of its own vector and its sentences' vectors.

A trailing image description (``[shares image: ...]``, as chat importers write it) counts as
a sentence of its own. A message of a single sentence has no derivatives: its one sentence
is the message.
"""

from __future__ import annotations

import re

__all__ = ["MAX_DERIVATIVES", "MIN_SENTENCE_CHARS", "sentence_spans", "split_sentences"]

#: At most this many sentences of one message are kept (the first ones).
MAX_DERIVATIVES = 16
#: Pieces shorter than this ("Wow!", "Yes.") merge into the sentence before them.
MIN_SENTENCE_CHARS = 12

# A sentence ends at ., ! or ? (optionally followed by a closing quote or bracket) before
# whitespace and an upper-case letter, a digit or an opening quote.
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")
_IMAGE = re.compile(r"\s*\[shares image: (?P<caption>[^\]]+)\]\s*$")
_LINES = re.compile(r"\n\s*\n|\n(?=\s*[-*•]\s)")
#: A piece ending in one of these did not end a sentence ("Dr. Smith", "St. Louis").
_ABBREVIATIONS = frozenset(
    ("mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "vs", "etc", "mt", "ft", "no", "approx")
)


def split_sentences(content: str) -> list[str]:
    """The sentences of ``content`` in order, stripped; ``[]`` when it has fewer than two.

    Paragraph breaks and list items always separate sentences; very short pieces join the
    sentence before them; an image description at the end is its own sentence
    (``"shares image: <caption>"``). At most :data:`MAX_DERIVATIVES` are returned.
    """
    body, caption = content, None
    image = _IMAGE.search(content)
    if image is not None:
        body, caption = content[: image.start()], image.group("caption").strip()
    pieces: list[str] = []
    for block in _LINES.split(body):
        for piece in _BOUNDARY.split(block.strip()):
            piece = " ".join(piece.split())
            if not piece:
                continue
            if pieces and _joins_previous(pieces[-1], piece):
                pieces[-1] = f"{pieces[-1]} {piece}"
            else:
                pieces.append(piece)
    if caption:
        pieces.append(f"shares image: {caption}")
    if len(pieces) < 2:
        return []
    return pieces[:MAX_DERIVATIVES]


def sentence_spans(content: str) -> list[tuple[int, int]] | None:
    """Where each sentence of :func:`split_sentences` lies in ``content``, as character
    ranges ``(start, end)`` in order (the image description's range covers
    ``"shares image: <caption>"``); ``[]`` when there are fewer than two sentences, ``None``
    when a sentence cannot be located (the caller then embeds the sentences as texts)."""
    spans: list[tuple[int, int]] = []
    cursor = 0
    for sentence in split_sentences(content):
        # split_sentences collapses runs of whitespace: match any run where it put a space
        pattern = r"\s+".join(re.escape(word) for word in sentence.split())
        found = re.compile(pattern).search(content, cursor)
        if found is None:
            return None
        spans.append((found.start(), found.end()))
        cursor = found.end()
    return spans


def _joins_previous(previous: str, piece: str) -> bool:
    """Whether ``piece`` continues ``previous``: it follows an abbreviation, or one of the
    two is too short to stand alone."""
    words = previous.rsplit(None, 1)
    if words and words[-1].rstrip(".").casefold() in _ABBREVIATIONS:
        return True
    return len(piece) < MIN_SENTENCE_CHARS or len(previous) < MIN_SENTENCE_CHARS
