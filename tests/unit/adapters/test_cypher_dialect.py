"""The statements the FalkorDB and Neo4j dialects generate, the scope predicate and the text
analysis."""

from __future__ import annotations

import pytest

from memmachine.adapters.cypher.cypher_dialect import (
    MAX_QUERY_TERMS,
    MAX_TERM_CHARS,
    CypherDialect,
    FalkorDBDialect,
    Neo4jDialect,
    document_terms,
    joined_terms,
    query_terms,
    scope_predicate,
)
from memmachine.errors import ConfigurationError, InvalidInputError
from memmachine.models import Scope


@pytest.fixture
def dialect() -> CypherDialect:
    return FalkorDBDialect()


# ---------------------------------------------------------------------- FalkorDB statements


def test_range_index(dialect: CypherDialect) -> None:
    assert dialect.range_index("Episode", "user_id") == (
        "CREATE INDEX FOR (n:Episode) ON (n.user_id)"
    )


def test_fulltext_index_indexes_normalised_text_verbatim(dialect: CypherDialect) -> None:
    assert dialect.fulltext_index("episode_terms", "Episode", "search_terms") == (
        "CALL db.idx.fulltext.createNodeIndex("
        "{label: 'Episode', stopwords: [], language: 'english'}, "
        "{field: 'search_terms', nostem: true})"
    )


def test_vector_index(dialect: CypherDialect) -> None:
    assert dialect.vector_index("episode_embedding", "Episode", "embedding", 384) == (
        "CREATE VECTOR INDEX FOR (n:Episode) ON (n.embedding) "
        "OPTIONS {dimension: 384, similarityFunction: 'cosine'}"
    )


@pytest.mark.parametrize("dimensions", [0, -3, True])
def test_vector_index_needs_positive_dimensions(dialect: CypherDialect, dimensions: int) -> None:
    with pytest.raises(ConfigurationError):
        dialect.vector_index("i", "Episode", "embedding", dimensions)


def test_vectors_are_vecf32_and_similarity_is_one_minus_distance(dialect: CypherDialect) -> None:
    assert dialect.vector_value("r.embedding") == "vecf32(r.embedding)"
    assert dialect.cosine_similarity("e.embedding", "vector") == (
        "(1.0 - vec.cosineDistance(e.embedding, vecf32($vector)))"
    )


def test_fulltext_candidates_take_the_query_as_a_parameter(dialect: CypherDialect) -> None:
    assert dialect.fulltext_candidates("episode_terms", "Episode", "q", "e") == (
        "CALL db.idx.fulltext.queryNodes('Episode', $q) YIELD node AS e"
    )


def test_fulltext_query_is_a_union_of_terms(dialect: CypherDialect) -> None:
    assert dialect.fulltext_query(["cat", "dog", "2024", "日本語"]) == "cat|dog|2024|日本語"


@pytest.mark.parametrize("term", ["", "cat dog", "cat|dog", "@cat", "cat*", "-x", "a_b"])
def test_fulltext_query_refuses_raw_text(dialect: CypherDialect, term: str) -> None:
    with pytest.raises(InvalidInputError):
        dialect.fulltext_query([term])


@pytest.mark.parametrize("name", ["Episode)-[:X]->(m", "e.id", "1abc", "", "a b", "`x`", "n'"])
def test_identifiers_are_checked(dialect: CypherDialect, name: str) -> None:
    with pytest.raises(ConfigurationError):
        dialect.range_index(name, "id")
    with pytest.raises(ConfigurationError):
        dialect.range_index("Episode", name)
    with pytest.raises(ConfigurationError):
        dialect.fulltext_candidates("i", "Episode", name, "e")


def test_already_indexed_errors_are_recognised(dialect: CypherDialect) -> None:
    assert dialect.is_already_indexed("Attribute 'id' is already indexed")
    assert not dialect.is_already_indexed("Invalid input 'X'")


# ---------------------------------------------------------------------- Neo4j statements


@pytest.fixture
def neo4j() -> Neo4jDialect:
    return Neo4jDialect()


def test_neo4j_satisfies_the_dialect_protocol(neo4j: Neo4jDialect) -> None:
    dialect: CypherDialect = neo4j
    assert dialect.name == "neo4j"


def test_neo4j_range_index_is_named_and_idempotent(neo4j: Neo4jDialect) -> None:
    assert neo4j.range_index("Episode", "user_id") == (
        "CREATE RANGE INDEX episode_user_id IF NOT EXISTS FOR (n:Episode) ON (n.user_id)"
    )
    assert neo4j.range_index("MemMachineMeta", "key") == (
        "CREATE RANGE INDEX memmachinemeta_key IF NOT EXISTS FOR (n:MemMachineMeta) ON (n.key)"
    )


def test_neo4j_uniqueness_constraints(neo4j: Neo4jDialect) -> None:
    assert neo4j.unique_constraint("session_key", "Session", ["key"]) == (
        "CREATE CONSTRAINT session_key IF NOT EXISTS FOR (n:Session) REQUIRE n.key IS UNIQUE"
    )
    assert neo4j.unique_constraint("episode_id", "Episode", ["tenant", "user_id", "id"]) == (
        "CREATE CONSTRAINT episode_id IF NOT EXISTS FOR (n:Episode) "
        "REQUIRE (n.tenant, n.user_id, n.id) IS UNIQUE"
    )
    with pytest.raises(ConfigurationError):
        neo4j.unique_constraint("nothing", "Episode", [])
    with pytest.raises(ConfigurationError):
        neo4j.unique_constraint("x) DROP", "Episode", ["id"])


def test_neo4j_fulltext_index_takes_normalised_terms_on_whitespace(neo4j: Neo4jDialect) -> None:
    assert neo4j.fulltext_index("episode_terms", "Episode", "search_terms") == (
        "CREATE FULLTEXT INDEX episode_terms IF NOT EXISTS "
        "FOR (n:Episode) ON EACH [n.search_terms] "
        "OPTIONS {indexConfig: {`fulltext.analyzer`: 'whitespace', "
        "`fulltext.eventually_consistent`: false}}"
    )


def test_neo4j_vector_index_is_cosine_with_fixed_dimensions(neo4j: Neo4jDialect) -> None:
    assert neo4j.vector_index("episode_embedding", "Episode", "embedding", 384) == (
        "CREATE VECTOR INDEX episode_embedding IF NOT EXISTS "
        "FOR (n:Episode) ON (n.embedding) "
        "OPTIONS {indexConfig: {`vector.dimensions`: 384, "
        "`vector.similarity_function`: 'cosine'}}"
    )


@pytest.mark.parametrize("dimensions", [0, -3, True])
def test_neo4j_vector_index_needs_positive_dimensions(neo4j: Neo4jDialect, dimensions: int) -> None:
    with pytest.raises(ConfigurationError):
        neo4j.vector_index("i", "Episode", "embedding", dimensions)


def test_neo4j_vectors_are_lists_and_similarity_is_rescaled(neo4j: Neo4jDialect) -> None:
    """``vector.similarity.cosine`` reports (1 + cos) / 2; the store reports cos."""
    assert neo4j.vector_value("r.embedding") == "r.embedding"
    assert neo4j.cosine_similarity("e.embedding", "vector") == (
        "(2.0 * vector.similarity.cosine(e.embedding, $vector) - 1.0)"
    )
    for cosine in (1.0, 0.5, 0.0, -1.0):
        neo4j_score = (1 + cosine) / 2
        assert 2.0 * neo4j_score - 1.0 == pytest.approx(cosine)


def test_neo4j_fulltext_candidates_use_the_named_index(neo4j: Neo4jDialect) -> None:
    assert neo4j.fulltext_candidates("episode_terms", "Episode", "q", "e") == (
        "CALL db.index.fulltext.queryNodes('episode_terms', $q) YIELD node AS e"
    )


def test_neo4j_fulltext_query_is_a_lucene_disjunction(neo4j: Neo4jDialect) -> None:
    assert neo4j.fulltext_query(["cat", "dog", "2024", "日本語"]) == (
        "cat OR dog OR 2024 OR 日本語"
    )
    assert neo4j.fulltext_query(query_terms('CAT? "dogs" -mat* title:x AND OR')) == (
        "cat OR dog OR mat OR titl OR x"
    )


@pytest.mark.parametrize(
    "terms",
    [[], [""], ["cat dog"], ["cat:dog"], ["cat*"], ["-x"], ['"x"'], ["a_b"], ["AND"], ["Cat"]],
)
def test_neo4j_fulltext_query_refuses_raw_text(neo4j: Neo4jDialect, terms: list[str]) -> None:
    with pytest.raises(InvalidInputError):
        neo4j.fulltext_query(terms)


@pytest.mark.parametrize("name", ["Episode)-[:X]->(m", "e.id", "1abc", "", "a b", "`x`", "n'"])
def test_neo4j_identifiers_are_checked(neo4j: Neo4jDialect, name: str) -> None:
    with pytest.raises(ConfigurationError):
        neo4j.range_index(name, "id")
    with pytest.raises(ConfigurationError):
        neo4j.fulltext_index(name, "Episode", "search_terms")
    with pytest.raises(ConfigurationError):
        neo4j.vector_index("i", "Episode", name, 3)
    with pytest.raises(ConfigurationError):
        neo4j.fulltext_candidates(name, "Episode", "q", "e")
    with pytest.raises(ConfigurationError):
        neo4j.cosine_similarity("e.embedding", name)


def test_neo4j_existing_schema_is_recognised(neo4j: Neo4jDialect) -> None:
    assert neo4j.is_already_indexed("An equivalent index already exists, 'Index( id=3 )'")
    assert neo4j.is_already_indexed("Neo.ClientError.Schema.EquivalentSchemaRuleAlreadyExists")
    assert not neo4j.is_already_indexed("Invalid input 'X'")


# ---------------------------------------------------------------------- scope predicate


def test_scope_predicate_matches_the_user_exactly() -> None:
    clause, params = scope_predicate("e", Scope(tenant="t", user_id="ann"))
    assert clause == (
        "e.tenant = $scope_tenant AND e.org_id = $scope_org_id "
        "AND e.project_id = $scope_project_id AND e.user_id = $scope_user_id"
    )
    assert params == {
        "scope_tenant": "t",
        "scope_org_id": "default",
        "scope_project_id": "default",
        "scope_user_id": "ann",
    }


def test_scope_predicate_narrows_by_what_is_set() -> None:
    scope = Scope(user_id="ann", agent_id="bot", session_id="s1", group_id="g")
    clause, params = scope_predicate("x", scope)
    assert clause.endswith(
        "x.agent_id = $scope_agent_id AND x.session_id = $scope_session_id "
        "AND x.group_id = $scope_group_id"
    )
    assert params["scope_agent_id"] == "bot"
    assert "scope_group_id" not in scope_predicate("x", Scope(user_id="ann"))[1]


def test_scope_values_never_enter_the_statement() -> None:
    # model_construct skips validation: the predicate must not rely on it
    scope = Scope.model_construct(
        tenant="t|{y}", org_id="o", project_id="p", user_id="x' OR 1=1 //"
    )
    clause, params = scope_predicate("e", scope)
    assert "OR" not in clause
    assert "{y}" not in clause
    assert params["scope_user_id"] == "x' OR 1=1 //"


def test_scope_predicate_checks_the_alias() -> None:
    with pytest.raises(ConfigurationError):
        scope_predicate("e) DETACH DELETE (e", Scope(user_id="ann"))


# ---------------------------------------------------------------------- text analysis


def test_terms_are_lowercase_words_without_punctuation_or_stopwords() -> None:
    assert document_terms("The CAT sat on the mat -- didn't it? (yes!)") == [
        "cat",
        "sat",
        "mat",
        "didn",
        "yes",
    ]


def test_terms_split_on_every_symbol_and_keep_digits_and_scripts() -> None:
    assert document_terms(
        "user@example.com C++ snake_case 2024-05-01 日本語 \uff23\uff41\uff54"
    ) == [
        "user",
        "exampl",
        "com",
        "c",
        "snake",
        "case",
        "2024",
        "05",
        "01",
        "日本",
        "本語",
        "cat",
    ]


@pytest.mark.parametrize(
    ("word", "stem"),
    [  # Snowball (Porter 2) English, for ASCII words only
        ("cats", "cat"),
        ("parties", "parti"),
        ("party", "parti"),
        ("hiking", "hike"),
        ("hiked", "hike"),
        ("hikes", "hike"),
        ("painting", "paint"),
        ("adopted", "adopt"),
        ("class", "class"),
        ("running", "run"),
        ("2023", "2023"),
        ("cafés", "cafés"),
    ],
)
def test_words_fold_to_their_snowball_stem(word: str, stem: str) -> None:
    assert document_terms(word) == [stem]


def test_a_query_matches_other_forms_of_its_words() -> None:
    assert query_terms("Who went hiking? They hiked!") == ["went", "hike"]
    assert document_terms("I love to hike") == ["love", "hike"]


def test_document_terms_keep_repeats_and_query_terms_do_not() -> None:
    assert document_terms("cat cats CAT dog") == ["cat", "cat", "cat", "dog"]
    assert query_terms("cat cats CAT dog") == ["cat", "dog"]


def test_query_terms_are_bounded() -> None:
    words = " ".join(f"w{i}" for i in range(100))
    assert query_terms(words) == [f"w{i}" for i in range(MAX_QUERY_TERMS)]
    assert query_terms("x" * (MAX_TERM_CHARS + 1) + " ok") == ["ok"]


@pytest.mark.parametrize("text", ["", "   ", "!!! ??? ...", "the of and to", "@|*-()"])
def test_nothing_searchable(text: str) -> None:
    assert query_terms(text) == []


def test_joined_terms_let_a_split_count_each_term() -> None:
    stored = joined_terms(["cat", "cat", "concat", "cat"])
    assert stored == " cat  cat  concat  cat "
    assert len(stored.split(" cat ")) - 1 == 3
    assert len(stored.split(" concat ")) - 1 == 1
    assert len(stored.split(" at ")) - 1 == 0
    assert joined_terms([]) == ""
