"""Cypher shared by the graph episode stores, and the seam where engines differ.

Graph stores (FalkorDB now, Neo4j later) run the same queries except for a few places:
index DDL, the full-text and vector procedures, how a vector parameter is written and
whether the engine reports cosine *distance* or *similarity*. Those places are the methods
of :class:`CypherDialect`; :class:`FalkorDBDialect` implements them for FalkorDB.

Everything else here is engine-neutral:

* :func:`scope_predicate` is the one place that turns a :class:`~memmachine.models.Scope`
  into a ``WHERE`` condition. Every episode query uses it.
* :func:`document_terms` / :func:`query_terms` are the text analysis behind full-text search.
  Episodes are indexed on their *normalised* terms (lowercase letters and digits, English
  stopwords dropped, plurals folded by the S-stemmer) and queries go through the same
  function, so what the index matches and what the store scores agree exactly, and no user
  text ever reaches a full-text query parser.

Labels, property and index names are identifiers chosen by the code, never by users; they
are still checked against ``[A-Za-z_][A-Za-z0-9_]*`` before being placed in a statement.
Values always travel as query parameters.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from memmachine.errors import ConfigurationError, InvalidInputError
from memmachine.models import Scope
from memmachine.retrieval.terms import (
    MAX_QUERY_TERMS,
    MAX_TERM_CHARS,
    STOPWORDS,
    TERM_PATTERN,
    document_terms,
    query_terms,
)

__all__ = [
    "MAX_QUERY_TERMS",
    "MAX_TERM_CHARS",
    "STOPWORDS",
    "CypherDialect",
    "FalkorDBDialect",
    "document_terms",
    "joined_terms",
    "query_terms",
    "scope_predicate",
]

#: Scope fields that always match exactly, then those that narrow a query when set.
_SCOPE_REQUIRED = ("tenant", "org_id", "project_id", "user_id")
_SCOPE_NARROWING = ("agent_id", "session_id", "group_id")

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def scope_predicate(alias: str, scope: Scope) -> tuple[str, dict[str, str]]:
    """The ``WHERE`` condition confining node ``alias`` to ``scope``, and its parameters.

    ``tenant``, ``org_id``, ``project_id`` and ``user_id`` always match exactly; ``agent_id``,
    ``session_id`` and ``group_id`` are added only when set. Parameters are named
    ``scope_<field>``, so several aliases in one query can share them.
    """
    node = _identifier(alias)
    clauses: list[str] = []
    params: dict[str, str] = {}
    for field in (*_SCOPE_REQUIRED, *_SCOPE_NARROWING):
        value = getattr(scope, field)
        if value is None:
            continue
        clauses.append(f"{node}.{field} = $scope_{field}")
        params[f"scope_{field}"] = value
    return " AND ".join(clauses), params


def joined_terms(terms: Sequence[str]) -> str:
    """Terms as stored for the full-text index: each wrapped in single spaces.

    ``" cat  sat  cat "`` lets a query count occurrences of a term exactly by splitting on
    ``" cat "``: the separators of neighbouring terms never overlap.
    """
    return "".join(f" {term} " for term in terms)


def _identifier(name: str) -> str:
    if not _IDENTIFIER.fullmatch(name):
        raise ConfigurationError(f"{name!r} is not a plain Cypher identifier")
    return name


class CypherDialect(Protocol):
    """The statements and expressions that differ between graph engines.

    Methods return Cypher text built only from identifiers and integers the code chooses;
    values (vectors, query strings) are referenced as ``$parameters``.
    """

    name: str

    def range_index(self, label: str, prop: str) -> str:
        """DDL for a range (exact-match) index on ``label.prop``."""
        ...

    def fulltext_index(self, index: str, label: str, prop: str) -> str:
        """DDL for the full-text index ``index`` on ``label.prop``. The indexed text is
        already normalised (:func:`joined_terms`): no stemming, no stopwords."""
        ...

    def vector_index(self, index: str, label: str, prop: str, dimensions: int) -> str:
        """DDL for the cosine vector index ``index`` on ``label.prop``."""
        ...

    def vector_value(self, expression: str) -> str:
        """``expression`` (a list of floats) as the engine's stored vector type."""
        ...

    def cosine_similarity(self, stored: str, vector_param: str) -> str:
        """Expression: cosine similarity in [-1, 1] (1 = same direction) between the stored
        vector ``stored`` and the list parameter ``$vector_param``."""
        ...

    def fulltext_candidates(self, index: str, label: str, query_param: str, alias: str) -> str:
        """A clause yielding, as node ``alias``, every ``label`` node whose indexed text
        matches the query in ``$query_param`` (built by :meth:`fulltext_query`)."""
        ...

    def fulltext_query(self, terms: Sequence[str]) -> str:
        """The engine's full-text query matching any of ``terms`` (from :func:`query_terms`;
        letters and digits only, never empty)."""
        ...

    def is_already_indexed(self, message: str) -> bool:
        """Whether an index DDL failed only because the index exists."""
        ...


class FalkorDBDialect:
    """FalkorDB 4.x: RediSearch-backed full-text indexes (one per label), ``vecf32`` vectors
    and ``vec.cosineDistance`` (a distance: similarity = 1 - distance)."""

    name = "falkordb"

    def range_index(self, label: str, prop: str) -> str:
        return f"CREATE INDEX FOR (n:{_identifier(label)}) ON (n.{_identifier(prop)})"

    def fulltext_index(self, index: str, label: str, prop: str) -> str:
        # FalkorDB has one full-text index per label, so ``index`` names nothing here.
        # Text arrives normalised: no stopwords, no stemming, no phonetics.
        _identifier(index)
        return (
            "CALL db.idx.fulltext.createNodeIndex("
            f"{{label: '{_identifier(label)}', stopwords: [], language: 'english'}}, "
            f"{{field: '{_identifier(prop)}', nostem: true}})"
        )

    def vector_index(self, index: str, label: str, prop: str, dimensions: int) -> str:
        _identifier(index)
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise ConfigurationError(f"vector dimensions must be a positive integer: {dimensions}")
        return (
            f"CREATE VECTOR INDEX FOR (n:{_identifier(label)}) ON (n.{_identifier(prop)}) "
            f"OPTIONS {{dimension: {dimensions}, similarityFunction: 'cosine'}}"
        )

    def vector_value(self, expression: str) -> str:
        return f"vecf32({expression})"

    def cosine_similarity(self, stored: str, vector_param: str) -> str:
        return (
            f"(1.0 - vec.cosineDistance({stored}, "
            f"{self.vector_value('$' + _identifier(vector_param))}))"
        )

    def fulltext_candidates(self, index: str, label: str, query_param: str, alias: str) -> str:
        _identifier(index)
        return (
            f"CALL db.idx.fulltext.queryNodes('{_identifier(label)}', "
            f"${_identifier(query_param)}) YIELD node AS {_identifier(alias)}"
        )

    def fulltext_query(self, terms: Sequence[str]) -> str:
        # RediSearch: terms separated by spaces must all match; ``|`` is a union.
        for term in terms:
            if not TERM_PATTERN.fullmatch(term):
                raise InvalidInputError(f"not a normalised search term: {term!r}", "query")
        return "|".join(terms)

    def is_already_indexed(self, message: str) -> bool:
        return "already indexed" in message
