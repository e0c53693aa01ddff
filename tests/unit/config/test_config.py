"""Settings: environment, the YAML file of MEMMACHINE_CONFIG, credentials and redaction."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from memmachine.bootstrap import build_manager
from memmachine.config import (
    EmbeddingSettings,
    LlmSettings,
    Settings,
    redact_url,
    resolve_credentials,
    url_address,
)
from memmachine.errors import ConfigurationError


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No MEMMACHINE_* variable of the calling shell leaks into these tests."""
    import os

    for name in list(os.environ):
        if name.startswith("MEMMACHINE_"):
            monkeypatch.delenv(name)


def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    path = tmp_path / "memmachine.yaml"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setenv("MEMMACHINE_CONFIG", str(path))
    return path


# --------------------------------------------------------------------------- sources


def test_yaml_file_sets_top_level_grouped_and_nested_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file(
        tmp_path,
        monkeypatch,
        """
port: 9001
working_key_prefix: fromfile
episode_store:
  url: falkordb://graph.internal:6380
  password: file-secret
startup:
  timeout_seconds: 12
  backoff:
    base_seconds: 0.25
embedding:
  provider: none
  batch_size: 7
limits:
  max_top_k: 12
""",
    )
    settings = Settings()
    assert settings.port == 9001
    assert settings.working_key_prefix == "fromfile"
    assert settings.episode_store_url == SecretStr("falkordb://graph.internal:6380")
    assert settings.episode_store_password == SecretStr("file-secret")
    assert settings.startup_timeout_seconds == 12
    assert settings.startup_backoff_base_seconds == 0.25
    assert settings.startup_backoff_max_seconds == 5.0  # default
    assert (settings.embedding.provider, settings.embedding.batch_size) == ("none", 7)
    assert settings.limits.max_top_k == 12


def test_environment_beats_the_file_and_arguments_beat_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file(
        tmp_path,
        monkeypatch,
        "port: 9001\nhost: 0.0.0.0\nembedding: {provider: none, batch_size: 7}\n",
    )
    monkeypatch.setenv("MEMMACHINE_PORT", "9002")
    monkeypatch.setenv("MEMMACHINE_EMBEDDING_BATCH_SIZE", "9")
    settings = Settings()
    assert settings.port == 9002  # environment over file
    assert settings.host == "0.0.0.0"  # file over default
    assert settings.embedding.batch_size == 9  # inside a section too
    assert settings.embedding.provider == "none"
    assert Settings(port=9003).port == 9003  # code (the CLI's flags) over everything


def test_no_file_means_environment_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMMACHINE_STARTUP_TIMEOUT_SECONDS", "3.5")
    monkeypatch.setenv("MEMMACHINE_STARTUP_BACKOFF_MAX_SECONDS", "1")
    settings = Settings()
    assert settings.startup_timeout_seconds == 3.5
    assert settings.startup_backoff_max_seconds == 1
    assert settings.episode_store_url is None
    assert settings.port == 8080


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prot: 1\n", "unknown setting(s) prot"),
        ("episode_store: {uri: x}\n", "episode_store_uri"),
        ("embedding: {modle: x}\n", "embedding.modle"),
        ("- a\n- b\n", "must be a mapping"),
        ("port: [1\n", "invalid YAML at line"),
    ],
)
def test_a_bad_file_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    config_file(tmp_path, monkeypatch, text)
    with pytest.raises(ConfigurationError) as caught:
        Settings(embedding=EmbeddingSettings(provider="none"))
    assert message in caught.value.message


def test_a_missing_file_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMMACHINE_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigurationError, match=r"MEMMACHINE_CONFIG=.*nope\.yaml"):
        Settings()


# --------------------------------------------------------------------------- credentials


def test_url_userinfo_wins_and_variables_fill_in() -> None:
    both = resolve_credentials("neo4j://alice:from-url@db:7687", "bob", SecretStr("from-var"))
    assert both.user == "alice"
    assert both.password == SecretStr("from-url")
    assert both.variable_ignored

    fill = resolve_credentials("neo4j://db:7687", "bob", SecretStr("from-var"))
    assert (fill.user, fill.password, fill.variable_ignored) == (
        "bob",
        SecretStr("from-var"),
        False,
    )

    user_only = resolve_credentials("postgresql://carol@db/mm", None, SecretStr("pw"))
    assert (user_only.user, user_only.password) == ("carol", SecretStr("pw"))

    # redis-py reads a lone userinfo as the password
    lone = resolve_credentials("redis://s3cret@cache:6379/0")
    assert (lone.user, lone.password) == (None, SecretStr("s3cret"))

    encoded = resolve_credentials("postgresql://u:p%40ss@db/mm")
    assert encoded.password == SecretStr("p@ss")


def test_passwords_are_secrets_and_never_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMMACHINE_EPISODE_STORE_URL", "neo4j://neo4j:url-pass@db:7687")
    monkeypatch.setenv("MEMMACHINE_EPISODE_STORE_USER", "neo4j")
    monkeypatch.setenv("MEMMACHINE_EPISODE_STORE_PASSWORD", "var-pass-1")
    monkeypatch.setenv("MEMMACHINE_PROFILE_STORE_URL", "postgresql+psycopg://mm@pg:5432/mm")
    monkeypatch.setenv("MEMMACHINE_PROFILE_STORE_PASSWORD", "var-pass-2")
    monkeypatch.setenv("MEMMACHINE_WORKING_STORE_URL", "rediss://:url-pass-3@cache:6380/1")
    monkeypatch.setenv("MEMMACHINE_WORKING_STORE_PASSWORD", "var-pass-4")
    settings = Settings()
    rendered = repr(settings) + str(settings) + str(settings.describe())
    for secret in ("url-pass", "var-pass-1", "var-pass-2", "url-pass-3", "var-pass-4"):
        assert secret not in rendered
    assert settings.describe() == {
        "episodic": "neo4j://neo4j:***@db:7687",
        "profile": "postgresql+psycopg://mm@pg:5432/mm",
        "working": "rediss://:***@cache:6380/1",
    }
    assert set(settings.secrets()) >= {"url-pass", "var-pass-1", "var-pass-2", "url-pass-3"}


def test_describe_names_the_embedded_defaults(tmp_path: Path) -> None:
    described = Settings(data_dir=tmp_path).describe()
    assert described["episodic"] == f"embedded FalkorDB in {tmp_path.resolve() / 'falkordb'}"
    assert described["working"] == described["episodic"]
    assert described["profile"] == f"SQLite {tmp_path.resolve() / 'profile.db'}"


@pytest.mark.parametrize(
    ("url", "redacted", "address"),
    [
        ("neo4j+s://neo4j:pw@db.example:7687", "neo4j+s://neo4j:***@db.example:7687", None),
        ("bolt://db", "bolt://db", "db:7687"),
        ("redis://:pw@cache/0", "redis://:***@cache/0", "cache:6379"),
        ("redis://pw@cache:6390", "redis://***@cache:6390", "cache:6390"),
        ("falkordb+unix:///run/f.sock", "falkordb+unix:///run/f.sock", "/run/f.sock"),
        (
            "postgresql+psycopg://u:pw@pg/mm?sslmode=require&password=pw",
            "postgresql+psycopg://u:***@pg/mm?sslmode=require&password=***",
            "pg:5432",
        ),
        ("sqlite+aiosqlite:////var/mm/p.db", "sqlite+aiosqlite:////var/mm/p.db", "/var/mm/p.db"),
        ("bolt://[::1]:7688", "bolt://[::1]:7688", "[::1]:7688"),
    ],
)
def test_redact_url_and_url_address(url: str, redacted: str, address: str | None) -> None:
    assert redact_url(url) == redacted
    assert "pw" not in url_address(url)
    if address is not None:
        assert url_address(url) == address


# --------------------------------------------------------------------------- selection


def offline(**values: object) -> Settings:
    return Settings(embedding=EmbeddingSettings(provider="none"), **values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "url", "variable"),
    [
        ("episode_store_url", "mongodb://db", "MEMMACHINE_EPISODE_STORE_URL"),
        ("profile_store_url", "mysql://u:pw@db/x", "MEMMACHINE_PROFILE_STORE_URL"),
        ("working_store_url", "memcached://c", "MEMMACHINE_WORKING_STORE_URL"),
    ],
)
async def test_an_unsupported_scheme_is_refused_before_anything_starts(
    tmp_path: Path, field: str, url: str, variable: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        await build_manager(offline(data_dir=tmp_path, **{field: url}))
    assert variable in caught.value.message
    assert "pw" not in caught.value.message
    assert not (tmp_path / "falkordb").exists()


@pytest.mark.parametrize("scheme", ["neo4j", "neo4j+s", "neo4j+ssc", "bolt", "bolt+s", "bolt+ssc"])
async def test_neo4j_schemes_choose_the_neo4j_episode_store(tmp_path: Path, scheme: str) -> None:
    import importlib.util

    settings = offline(
        data_dir=tmp_path,
        episode_store_url=f"{scheme}://neo4j:pw@db.invalid:7687/memories",
        working_store_url="redis://127.0.0.1:1/0",
    )
    if importlib.util.find_spec("memmachine.adapters.neo4j.neo4j_episode_store") is None:
        with pytest.raises(ConfigurationError, match="Neo4j episode store is not available"):
            await build_manager(settings)
        return
    manager = await build_manager(settings)  # wired, not started: nothing connects
    assert manager.episodes.kind == "neo4j"
    assert type(manager.episodes).__name__ == "IndexedEpisodeStore"  # searched in memory
    assert type(manager.episodes.inner).__name__ == "Neo4jEpisodeStore"  # type: ignore[attr-defined]
    await manager.close()
    unindexed = settings.model_copy(
        update={"search_index": settings.search_index.model_copy(update={"enabled": False})}
    )
    manager = await build_manager(unindexed)
    assert type(manager.episodes).__name__ == "Neo4jEpisodeStore"
    await manager.close()


async def test_postgres_urls_choose_sql_on_postgresql_and_no_embedded_server(
    tmp_path: Path,
) -> None:
    for url in ("postgresql+psycopg://mm@127.0.0.1:1/mm", "postgresql://mm@127.0.0.1:1/mm"):
        manager = await build_manager(
            offline(
                data_dir=tmp_path,
                episode_store_url="falkordb://127.0.0.1:1",
                profile_store_url=url,
                working_store_url="redis://127.0.0.1:1/0",
                profile_store_password="pw",
            )
        )
        assert manager.profile.kind == "postgresql"
        assert manager.episodes.kind == "falkordb"
        health = await manager.health()  # nothing started: every store is down, none raises
        assert {name for name, report in health.stores.items() if report.status == "down"} >= {
            "episodic",
            "profile",
            "working",
        }
        assert "embedded-falkordb" not in health.stores
        await manager.close()
    assert not (tmp_path / "falkordb").exists()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        # A third-party server named by memmachine's own variable never gets the OpenAI key.
        ({"OPENAI_API_KEY": "sk-openai", "MEMMACHINE_LLM_BASE_URL": "http://vllm:8000/v1"}, None),
        # OPENAI_* together (a proxy the user set up for the OpenAI tools) keep it.
        ({"OPENAI_API_KEY": "sk-openai", "OPENAI_BASE_URL": "http://proxy/v1"}, "sk-openai"),
        # OpenAI itself, named or by default, gets it.
        (
            {"OPENAI_API_KEY": "sk-openai", "MEMMACHINE_LLM_BASE_URL": "https://api.openai.com/v1"},
            "sk-openai",
        ),
        ({"OPENAI_API_KEY": "sk-openai"}, "sk-openai"),
        # memmachine's own key goes wherever memmachine's base URL says.
        (
            {
                "OPENAI_API_KEY": "sk-openai",
                "MEMMACHINE_LLM_API_KEY": "local-key",
                "MEMMACHINE_LLM_BASE_URL": "http://vllm:8000/v1",
            },
            "local-key",
        ),
    ],
)
def test_the_openai_key_only_goes_to_openai_or_with_openai_base_url(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str | None
) -> None:
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "MEMMACHINE_LLM_API_KEY",
        "MEMMACHINE_LLM_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    key = LlmSettings().api_key
    assert (None if key is None else key.get_secret_value()) == expected
