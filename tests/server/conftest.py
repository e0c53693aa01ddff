"""A real app on the embedded stores, driven through FastAPI's TestClient."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memmachine.config import EmbeddingSettings, Settings
from memmachine_server.app import create_app
from tests.conftest import shared_model_dir

AppFactory = Callable[..., TestClient]
#: Where test clients send requests: a loopback name, as a local client would (a server
#: serving without a key answers no other host name).
LOCAL = "http://localhost"


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    """Settings for a test app: embedded stores in ``data_dir`` and the shared model when
    present (lexical-only otherwise, which the tests that need vectors check for)."""
    model = shared_model_dir()
    embedding = (
        EmbeddingSettings(provider="local", model=str(model))
        if model is not None
        else EmbeddingSettings(provider="none")
    )
    values: dict[str, Any] = {"data_dir": data_dir, "embedding": embedding}
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One started app per test module; tests use distinct user ids to stay independent."""
    settings = make_settings(tmp_path_factory.mktemp("api"))
    with TestClient(create_app(settings), raise_server_exceptions=False, base_url=LOCAL) as client:
        yield client


@pytest.fixture
def app_factory(tmp_path: Path) -> Iterator[AppFactory]:
    """Start extra apps with their own settings; all are stopped at the end of the test."""
    opened: list[TestClient] = []

    def start(**overrides: Any) -> TestClient:
        settings = make_settings(
            overrides.pop("data_dir", tmp_path / f"app{len(opened)}"), **overrides
        )
        client = TestClient(create_app(settings), raise_server_exceptions=False, base_url=LOCAL)
        client.__enter__()
        opened.append(client)
        return client

    yield start
    for client in reversed(opened):
        client.__exit__(None, None, None)
