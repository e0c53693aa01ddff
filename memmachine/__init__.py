"""memmachine: working, episodic and profile memory for AI agents.

``MemoryLayer`` is the blocking entry point; ``open_manager`` the async one.
"""

from memmachine.bootstrap import build_manager, open_manager
from memmachine.config import Settings
from memmachine.errors import (
    AuthenticationError,
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    MemMachineError,
    NotFoundError,
    PayloadTooLargeError,
    StoreError,
    StoreUnavailableError,
)
from memmachine.layer import MemoryLayer
from memmachine.manager import MemoryManager
from memmachine.models import Episode, Fact, NewMessage, Scope, WorkingMemory, WorkingMessage
from memmachine.prompting import MemoryPrompt, build_memory_prompt
from memmachine.tools import execute_tool_call, memory_tools

__all__ = [
    "AuthenticationError",
    "ConfigurationError",
    "ConflictError",
    "Episode",
    "Fact",
    "InvalidInputError",
    "MemMachineError",
    "MemoryLayer",
    "MemoryManager",
    "MemoryPrompt",
    "NewMessage",
    "NotFoundError",
    "PayloadTooLargeError",
    "Scope",
    "Settings",
    "StoreError",
    "StoreUnavailableError",
    "WorkingMemory",
    "WorkingMessage",
    "build_manager",
    "build_memory_prompt",
    "execute_tool_call",
    "memory_tools",
    "open_manager",
]
