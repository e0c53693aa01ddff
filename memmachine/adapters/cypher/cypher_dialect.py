"""Cypher shared by the graph episode stores, and the seam where engines differ.

Graph stores (FalkorDB, Neo4j) run the same queries except for a few places: index DDL, the
full-text and vector procedures, how a vector parameter is written and whether the engine
reports cosine *distance* or *similarity*. Those places are the methods of
:class:`CypherDialect`; :class:`FalkorDBDialect` and :class:`Neo4jDialect` implement them.

Everything else here is engine-neutral:

* :func:`scope_predicate` is the one place that turns a :class:`~memmachine.models.Scope`
  into a ``WHERE`` condition. Every episode query uses it.
* :func:`document_terms` / :func:`query_terms` are the text analysis behind full-text search.
  Episodes are indexed on their *normalised* terms (lowercase letters and digits, English
  stopwords dropped, plurals folded by the S-stemmer) and queries go through the same
  function, so what the index matches and what the store scores agree exactly, and no user
  text ever reaches a full-text query parser.
* The store behaviour written once over a dialect is
  :class:`~memmachine.adapters.cypher.cypher_episode_store.CypherEpisodeStore`.

Labels, property and index names are identifiers chosen by the code, never by users; they
are still checked against ``[A-Za-z_][A-Za-z0-9_]*`` before being placed in a statement.
Values always travel as query parameters.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from memmachine.errors import ConfigurationError, InvalidInputError
from memmachine.indexing.terms import (
    MAX_QUERY_TERMS,
    MAX_TERM_CHARS,
    STOPWORDS,
    TERM_PATTERN,
    document_terms,
    query_terms,
)
from memmachine.models import Scope

__all__ = [
    "MAX_QUERY_TERMS",
    "MAX_TERM_CHARS",
    "STOPWORDS",
    "CypherDialect",
    "FalkorDBDialect",
    "Neo4jDialect",
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

    def vector_from_result(self, value: object) -> npt.NDArray[np.float32]:
        """A stored vector as the engine returns it in a result row, as float32."""
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

    def vector_from_result(self, value: object) -> npt.NDArray[np.float32]:
        # The verbose reply writes a vecf32 as text: "<0.125730, -0.132105, ...>".
        if isinstance(value, str):
            return np.array(value.strip("<> ").split(","), dtype=np.float32)
        return np.asarray(value, dtype=np.float32)


class Neo4jDialect:
    """Neo4j 5 (5.18 or later): named schema objects created with ``IF NOT EXISTS``, Lucene
    full-text indexes queried through ``db.index.fulltext.queryNodes``, vectors stored as
    plain ``LIST<FLOAT>`` properties and ``vector.similarity.cosine``, which reports a
    similarity *rescaled* to [0, 1] (``(1 + cos) / 2``): cosine = 2 * score - 1."""

    name = "neo4j"

    def range_index(self, label: str, prop: str) -> str:
        label, prop = _identifier(label), _identifier(prop)
        return (
            f"CREATE RANGE INDEX {label.lower()}_{prop} IF NOT EXISTS FOR (n:{label}) ON (n.{prop})"
        )

    def unique_constraint(self, name: str, label: str, props: Sequence[str]) -> str:
        """DDL for a (composite) property uniqueness constraint: no two ``label`` nodes
        share the combination of ``props``. Also backs a range index on them."""
        if not props:
            raise ConfigurationError("a uniqueness constraint needs at least one property")
        node = _identifier(label)
        keys = ", ".join(f"n.{_identifier(prop)}" for prop in props)
        target = keys if len(props) == 1 else f"({keys})"
        return (
            f"CREATE CONSTRAINT {_identifier(name)} IF NOT EXISTS "
            f"FOR (n:{node}) REQUIRE {target} IS UNIQUE"
        )

    def fulltext_index(self, index: str, label: str, prop: str) -> str:
        # The text arrives normalised (lowercase terms separated by single spaces), so the
        # whitespace analyzer indexes exactly those terms; updates are visible at commit.
        return (
            f"CREATE FULLTEXT INDEX {_identifier(index)} IF NOT EXISTS "
            f"FOR (n:{_identifier(label)}) ON EACH [n.{_identifier(prop)}] "
            "OPTIONS {indexConfig: {`fulltext.analyzer`: 'whitespace', "
            "`fulltext.eventually_consistent`: false}}"
        )

    def vector_index(self, index: str, label: str, prop: str, dimensions: int) -> str:
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise ConfigurationError(f"vector dimensions must be a positive integer: {dimensions}")
        return (
            f"CREATE VECTOR INDEX {_identifier(index)} IF NOT EXISTS "
            f"FOR (n:{_identifier(label)}) ON (n.{_identifier(prop)}) "
            f"OPTIONS {{indexConfig: {{`vector.dimensions`: {dimensions}, "
            "`vector.similarity_function`: 'cosine'}}"
        )

    def vector_value(self, expression: str) -> str:
        return expression  # a LIST<FLOAT> property is what the vector index reads

    def cosine_similarity(self, stored: str, vector_param: str) -> str:
        return f"(2.0 * vector.similarity.cosine({stored}, ${_identifier(vector_param)}) - 1.0)"

    def fulltext_candidates(self, index: str, label: str, query_param: str, alias: str) -> str:
        # A Neo4j full-text index is named and may span labels: ``label`` names nothing here.
        _identifier(label)
        return (
            f"CALL db.index.fulltext.queryNodes('{_identifier(index)}', "
            f"${_identifier(query_param)}) YIELD node AS {_identifier(alias)}"
        )

    def fulltext_query(self, terms: Sequence[str]) -> str:
        # Lucene classic syntax: terms of letters and digits need no escaping, and lowercase
        # terms can never be the operators AND/OR/NOT.
        if not terms:
            raise InvalidInputError("a full-text query needs at least one term", "query")
        for term in terms:
            if not TERM_PATTERN.fullmatch(term) or any(char.isupper() for char in term):
                raise InvalidInputError(f"not a normalised search term: {term!r}", "query")
        return " OR ".join(terms)

    def is_already_indexed(self, message: str) -> bool:
        # ``IF NOT EXISTS`` makes the DDL idempotent; this only covers a lost race.
        return "already exists" in message or "EquivalentSchemaRuleAlreadyExists" in message

    def vector_from_result(self, value: object) -> npt.NDArray[np.float32]:
        # A LIST<FLOAT> property arrives as a list of Python floats.
        return np.asarray(value, dtype=np.float32)
