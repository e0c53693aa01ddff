"""Rankings the SQL stores compute in Python: BM25 over stored search terms and cosine
similarity over stored float32 embeddings. The profile and procedure stores rank with the
same functions, so a fact and a procedure with the same text rank alike."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "Collection",
    "FloatArray",
    "bm25_over",
    "bm25_ranking",
    "cosine_ranking",
    "python_rankings",
    "unit_vector",
]

_BM25_K1 = 1.2
_BM25_B = 0.75

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Collection:
    """BM25 collection statistics over the documents a ranking compares."""

    count: int
    average_length: float
    document_frequency: dict[str, int]


def bm25_over(terms: Sequence[str], documents: Sequence[tuple[str, str]]) -> list[str]:
    """Ids of the ``(id, search_terms)`` documents with a positive BM25 score for
    ``terms``, best first, with the collection statistics taken over ``documents``."""
    frequency: Counter[str] = Counter()
    lengths = 0
    for _, search_terms in documents:
        words = search_terms.split()
        lengths += len(words)
        frequency.update(set(words) & set(terms))
    collection = Collection(
        count=len(documents),
        average_length=lengths / len(documents) if documents else 0.0,
        document_frequency=dict(frequency),
    )
    return bm25_ranking(terms, documents, collection)


def bm25_ranking(
    terms: Sequence[str], candidates: Sequence[tuple[str, str]], collection: Collection
) -> list[str]:
    """Ids of the ``(id, search_terms)`` candidates with a positive BM25 score, best first
    (ties keep candidate order)."""
    average = collection.average_length or 1.0
    idf = {
        term: math.log(
            1.0
            + (collection.count - collection.document_frequency.get(term, 0) + 0.5)
            / (collection.document_frequency.get(term, 0) + 0.5)
        )
        for term in terms
    }
    scores: list[tuple[float, int, str]] = []
    for position, (fact_id, search_terms) in enumerate(candidates):
        document = Counter(search_terms.split())
        length = sum(document.values())
        norm = _BM25_K1 * (1 - _BM25_B + _BM25_B * length / average)
        score = 0.0
        for term in terms:
            tf = document.get(term, 0)
            if tf:
                score += idf[term] * tf * (_BM25_K1 + 1) / (tf + norm)
        if score > 0:
            scores.append((score, position, fact_id))
    scores.sort(key=lambda entry: (-entry[0], entry[1]))
    return [fact_id for _, _, fact_id in scores]


def unit_vector(embedding: Sequence[float] | None) -> FloatArray | None:
    """``embedding`` scaled to length 1; ``None`` when absent, empty, zero or not finite."""
    if embedding is None:
        return None
    vector = np.asarray(embedding, dtype=np.float32)
    if vector.ndim != 1 or vector.size == 0:
        return None
    norm = float(np.linalg.norm(vector))
    if not math.isfinite(norm) or norm == 0.0:
        return None
    return vector / norm


def cosine_ranking(query: FloatArray, embeddings: Sequence[tuple[str, bytes | None]]) -> list[str]:
    """Ids of the ``(id, embedding bytes)`` rows with positive cosine similarity to the
    unit vector ``query``, best first (ties keep input order). Embeddings of another size,
    missing or all zeros are skipped."""
    size = query.size * 4
    usable = [(fact_id, raw) for fact_id, raw in embeddings if raw is not None and len(raw) == size]
    if not usable:
        return []
    matrix = np.frombuffer(b"".join(raw for _, raw in usable), dtype="<f4").reshape(
        len(usable), query.size
    )
    norms = np.linalg.norm(matrix, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        similarities = (matrix @ query) / norms
    order = np.argsort(-np.where(np.isfinite(similarities), similarities, 0.0), kind="stable")
    return [
        usable[index][0]
        for index in order.tolist()
        if norms[index] > 0 and math.isfinite(similarities[index]) and similarities[index] > 0
    ]


def python_rankings(
    terms: Sequence[str],
    query: FloatArray | None,
    rows: Sequence[tuple[str, str, bytes | None]],
) -> dict[str, list[str]]:
    """The ``lexical`` (BM25 over ``terms``) and ``semantic`` (cosine to ``query``) rankings
    of ``(id, search_terms, embedding bytes)`` rows, each present only when it has a query
    side: the shape of a search a store answers in Python rather than in SQL."""
    rankings: dict[str, list[str]] = {}
    if terms:
        rankings["lexical"] = bm25_over(terms, [(row[0], row[1]) for row in rows])
    if query is not None:
        rankings["semantic"] = cosine_ranking(query, [(row[0], row[2]) for row in rows])
    return rankings
