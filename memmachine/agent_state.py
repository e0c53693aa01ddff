"""Typed agent state, the public names: a pydantic model per agent, loaded and saved per
scope (see :mod:`memmachine.memory.agent_state`), through a :class:`StateBackend`
(:mod:`memmachine.ports.state`) such as the session's working memory
(:mod:`memmachine.memory.working_state`)."""

from __future__ import annotations

from memmachine.memory.agent_state import AgentStateStore, LoadedState, Migration, StateHandle
from memmachine.memory.working_state import WorkingMemoryStateBackend
from memmachine.ports.state import (
    STATE_NAME_PATTERN,
    StateBackend,
    StoredState,
    check_expected_revision,
    record_key,
    scope_fields,
    stale_revision,
)

__all__ = [
    "STATE_NAME_PATTERN",
    "AgentStateStore",
    "LoadedState",
    "Migration",
    "StateBackend",
    "StateHandle",
    "StoredState",
    "WorkingMemoryStateBackend",
    "check_expected_revision",
    "record_key",
    "scope_fields",
    "stale_revision",
]
