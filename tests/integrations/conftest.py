"""A live memmachine server for the framework adapters, and SDK clients on it.

The adapters talk to the real app over HTTP (uvicorn on a loopback port, embedded stores),
as they would in an agent's process. Two API keys: ``KEY`` for tenant ``t1`` and
``OTHER_TENANT_KEY`` for tenant ``t2``. Tests use distinct user ids (the ``unique`` fixture)
to stay independent on the shared server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from memmachine_sdk import AsyncClient, Client
from memmachine_server.background import serve_in_background
from tests.server.conftest import make_settings

KEY = "integrations-key"
OTHER_TENANT_KEY = "other-tenant-key"


@pytest.fixture(scope="package")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = make_settings(
        tmp_path_factory.mktemp("integrations"), api_keys=f"{KEY}=t1,{OTHER_TENANT_KEY}=t2"
    )
    with serve_in_background(settings) as url:
        yield url


@pytest.fixture
def client(server_url: str) -> Iterator[Client]:
    with Client(server_url, api_key=KEY) as mm:
        yield mm


@pytest.fixture
async def async_client(server_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server_url, api_key=KEY) as mm:
        yield mm
