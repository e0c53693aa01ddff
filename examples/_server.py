"""What the framework examples share: a memmachine server of their own.

Each framework example (``langgraph_memory``, ``langchain_history``,
``openai_agents_memory``, ``llama_index_memory``) talks to memmachine the way an agent in
production does, over REST through the SDK. So that one command runs it with no setup,
:func:`example_server` starts the real server in a background thread: on a free loopback
port, with one API key, over embedded stores in a temporary directory that is removed at the
end. With your own server, replace it with its URL and key:
``Client("https://memory.example.com", api_key=...)``.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from examples._common import Checks
from memmachine import Settings
from memmachine_sdk import AsyncClient, Client
from memmachine_server.background import serve_in_background

__all__ = ["API_KEY", "example_server", "run_with_async_client", "run_with_client"]

#: The example server's one API key (tenant ``examples``).
API_KEY = "example-key"


@contextmanager
def example_server(name: str) -> Iterator[str]:
    """Start a memmachine server for example ``name``; yield its URL; stop it and remove
    its data directory on the way out. Settings come from the environment as for
    ``memmachine serve`` (``MEMMACHINE_EMBEDDING_MODEL`` for search by meaning)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    data_dir = Path(tempfile.mkdtemp(prefix=f"mm-{name}-"))
    settings = Settings(data_dir=data_dir, api_keys=SecretStr(f"{API_KEY}=examples"))
    print(f"{name}: data directory {data_dir}")
    try:
        with serve_in_background(settings) as url:
            with Client(url, api_key=API_KEY) as mm:
                mode = mm.health().mode
            print(f"{name}: memmachine server at {url}; search {mode}")
            yield url
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
        print(f"{name}: server stopped, temporary data directory {data_dir} removed")


def run_with_client(name: str, story: Callable[[Client], Checks]) -> int:
    """Run ``story`` with a blocking SDK client on a fresh :func:`example_server`; print its
    closing line and return the exit status."""
    with example_server(name) as url, Client(url, api_key=API_KEY) as mm:
        checks = story(mm)
    return checks.finish()


def run_with_async_client(
    name: str, story: Callable[[AsyncClient], Coroutine[Any, Any, Checks]]
) -> int:
    """:func:`run_with_client` for an async ``story``, with an :class:`AsyncClient`."""

    async def with_client(url: str) -> Checks:
        async with AsyncClient(url, api_key=API_KEY) as mm:
            return await story(mm)

    with example_server(name) as url:
        checks = asyncio.run(with_client(url))
    return checks.finish()
