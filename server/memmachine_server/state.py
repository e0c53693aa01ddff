"""What the app holds while it runs, reached from requests through ``app.state``."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from memmachine.config import Settings
from memmachine.manager import MemoryManager
from memmachine.memory.attachments import AttachmentService
from memmachine.telemetry import Telemetry
from memmachine_server.keyring import Keyring


@dataclass
class AppState:
    settings: Settings
    manager: MemoryManager
    api_keys: dict[str, str]
    #: The accepted keys (store, static, admin), the key store and the rate limiter;
    #: ``None`` = static and admin keys from ``settings`` only.
    keyring: Keyring | None = None
    #: The app's metrics and tracer (``None`` in an app state built without them).
    telemetry: Telemetry | None = None
    #: Takes attachments in and hands their bytes back.
    attachments: AttachmentService | None = None


def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.memmachine
    return state


def manager_of(request: Request) -> MemoryManager:
    return app_state(request).manager
