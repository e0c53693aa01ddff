"""Pytest fixtures around :mod:`tests.fakes.llm_server`.

Import the fixture into a test module (``from tests.fakes.llm_fixtures import llm_server``)
and take ``llm_server`` as an argument: a started :class:`ScriptedChatServer` with an empty
script, stopped after the test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.llm_server import ScriptedChatServer

__all__ = ["llm_server"]


@pytest.fixture
def llm_server() -> Iterator[ScriptedChatServer]:
    """A started scripted OpenAI-compatible chat server on loopback."""
    with ScriptedChatServer() as server:
        yield server
