"""The Neo4j episode store without a server: configuration, schema, error mapping, and how
it fails when no server answers. Its behaviour against a server is the contract suite's
``neo4j`` leg (``tests/contract/``)."""

from __future__ import annotations

import socket

import pytest
from neo4j import exceptions as neo4j_errors

from memmachine.adapters.neo4j.neo4j_episode_store import Neo4jEpisodeStore, store_error
from memmachine.errors import (
    ConfigurationError,
    ConflictError,
    StoreError,
    StoreUnavailableError,
    WriteOutcomeUnknownError,
)
from memmachine.models import Scope
from memmachine.ports import EpisodeStore

# ---------------------------------------------------------------------- configuration


def test_it_is_an_episode_store() -> None:
    store = Neo4jEpisodeStore("neo4j://db.example:7687", embedding_dimensions=4)
    assert isinstance(store, EpisodeStore)
    assert (store.name, store.kind) == ("episodic", "neo4j")
    assert store.embedding_dimensions == 4


def test_credentials_and_database_come_from_the_url() -> None:
    store = Neo4jEpisodeStore("neo4j+s://ann:p%40ss%3Aword@db.example:7687/memories")
    assert store._url == "neo4j+s://db.example:7687"
    assert (store._user, store._password, store.database) == ("ann", "p@ss:word", "memories")


def test_arguments_win_over_the_url() -> None:
    store = Neo4jEpisodeStore(
        "bolt://ann:old@db.example:7687/memories", user="bob", password="new", database="other"
    )
    assert store._url == "bolt://db.example:7687"
    assert (store._user, store._password, store.database) == ("bob", "new", "other")


def test_a_url_without_credentials_keeps_the_default_database() -> None:
    store = Neo4jEpisodeStore("bolt://[::1]:7687")
    assert store._url == "bolt://[::1]:7687"
    assert (store._user, store._password, store.database) == (None, None, None)


@pytest.mark.parametrize(
    "url", ["redis://localhost:6379", "http://localhost:7474", "localhost:7687", "neo4j://"]
)
def test_other_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigurationError):
        Neo4jEpisodeStore(url)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"embedding_dimensions": 0},
        {"embedding_dimensions": -1},
        {"max_connection_pool_size": 0},
        {"timeout_seconds": 0},
        {"timeout_seconds": -1},
    ],
)
def test_settings_that_cannot_work_are_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(ConfigurationError):
        Neo4jEpisodeStore("neo4j://localhost:7687", **kwargs)


# ---------------------------------------------------------------------- schema


def test_schema_statements() -> None:
    store = Neo4jEpisodeStore("neo4j://localhost:7687", embedding_dimensions=384)
    assert store.schema_statements() == [
        "CREATE CONSTRAINT episode_id_per_user IF NOT EXISTS FOR (n:Episode) "
        "REQUIRE (n.tenant, n.org_id, n.project_id, n.user_id, n.id) IS UNIQUE",
        "CREATE CONSTRAINT session_key IF NOT EXISTS FOR (n:Session) REQUIRE n.key IS UNIQUE",
        "CREATE CONSTRAINT user_ledger_key IF NOT EXISTS FOR (n:UserLedger) "
        "REQUIRE n.key IS UNIQUE",
        "CREATE CONSTRAINT memmachine_meta_key IF NOT EXISTS FOR (n:MemMachineMeta) "
        "REQUIRE n.key IS UNIQUE",
        "CREATE RANGE INDEX episode_id IF NOT EXISTS FOR (n:Episode) ON (n.id)",
        "CREATE RANGE INDEX episode_user_id IF NOT EXISTS FOR (n:Episode) ON (n.user_id)",
        "CREATE RANGE INDEX episode_session_id IF NOT EXISTS FOR (n:Episode) ON (n.session_id)",
        "CREATE RANGE INDEX session_user_id IF NOT EXISTS FOR (n:Session) ON (n.user_id)",
        "CREATE FULLTEXT INDEX episode_terms IF NOT EXISTS FOR (n:Episode) "
        "ON EACH [n.search_terms] OPTIONS {indexConfig: {`fulltext.analyzer`: 'whitespace', "
        "`fulltext.eventually_consistent`: false}}",
    ]
    # nothing reads a vector index: the one earlier versions made is dropped
    assert store.obsolete_statements() == ["DROP INDEX episode_embedding IF EXISTS"]


def test_no_store_creates_a_vector_index() -> None:
    for dimensions in (None, 384):
        store = Neo4jEpisodeStore("neo4j://localhost:7687", embedding_dimensions=dimensions)
        assert not any("VECTOR" in statement for statement in store.schema_statements())


# ---------------------------------------------------------------------- error mapping


def test_a_uniqueness_violation_is_a_conflict() -> None:
    error = store_error(neo4j_errors.ConstraintError("Node(7) already exists with label"))
    assert isinstance(error, ConflictError)
    assert "Node(7)" not in error.message  # nothing of the other node is repeated


def test_a_connection_lost_during_commit_is_an_unknown_outcome() -> None:
    # The driver does not retry it (the commit may have happened), and neither may we.
    error = store_error(neo4j_errors.IncompleteCommit("connection lost during commit"))
    assert isinstance(error, WriteOutcomeUnknownError)
    assert error.code == "write_outcome_unknown"
    assert not neo4j_errors.IncompleteCommit("x").is_retryable()


def test_a_transaction_the_server_timed_out_is_unavailable_not_unknown() -> None:
    # The server rolled it back: nothing was applied, so the caller may simply retry (503).
    timed_out = neo4j_errors.Neo4jError._hydrate_neo4j(
        code="Neo.ClientError.Transaction.TransactionTimedOutClientConfiguration",
        message="The transaction has been terminated.",
    )
    error = store_error(timed_out)
    assert type(error) is StoreUnavailableError
    assert "timeout" in error.message


@pytest.mark.parametrize(
    "exc",
    [
        neo4j_errors.ServiceUnavailable("no route"),
        neo4j_errors.RoutingServiceUnavailable("no routing"),
        neo4j_errors.SessionExpired("gone"),
        neo4j_errors.AuthError("wrong password"),
        neo4j_errors.TokenExpired("expired"),
        neo4j_errors.TransientError("deadlock, still after retries"),
        neo4j_errors.DatabaseUnavailable("starting"),
        neo4j_errors.ConnectionAcquisitionTimeoutError("pool exhausted"),
        ConnectionRefusedError(111, "refused"),
        TimeoutError("slow"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_an_unreachable_server_is_unavailable(exc: Exception) -> None:
    error = store_error(exc)
    assert isinstance(error, StoreUnavailableError)
    assert error.store == "episodic"


@pytest.mark.parametrize(
    "exc",
    [
        neo4j_errors.CypherSyntaxError("Invalid input"),
        neo4j_errors.CypherTypeError("Expected a list"),
        neo4j_errors.Forbidden("no write privilege"),
        neo4j_errors.ClientError("database not found"),
        neo4j_errors.DatabaseError("disk full"),
        neo4j_errors.ConfigurationError("notification filters unsupported"),
        neo4j_errors.DriverError("something else"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_a_refused_query_is_a_store_error(exc: Exception) -> None:
    error = store_error(exc)
    assert type(error) is StoreError
    assert error.store == "episodic"
    assert error.message.startswith("episode store")


# ---------------------------------------------------------------------- without a server


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_health_before_start_is_down() -> None:
    health = await Neo4jEpisodeStore("neo4j://localhost:7687", database="memories").health()
    assert (health.name, health.kind, health.status) == ("episodic", "neo4j", "down")
    assert health.detail is not None
    assert "not started" in health.detail
    assert "'memories'" in health.detail


@pytest.mark.parametrize("scheme", ["bolt", "neo4j"])
async def test_start_without_a_server_fails_fast_and_cleanly(scheme: str) -> None:
    store = Neo4jEpisodeStore(f"{scheme}://127.0.0.1:{_closed_port()}", password="secret")
    with pytest.raises(StoreUnavailableError) as caught:
        await store.start()
    assert caught.value.store == "episodic"
    assert (await store.health()).status == "down"
    with pytest.raises(StoreUnavailableError):
        await store.count_episodes(Scope(user_id="ann"))
    await store.close()
    await store.close()
