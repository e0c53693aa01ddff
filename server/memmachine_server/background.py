"""memmachine's REST server in a background thread of the calling process: for examples,
notebooks and tests that need a real server next to the code that talks to it.

    with serve_in_background(Settings(data_dir="/tmp/mm")) as url:
        with Client(url) as mm: ...

The app is the one ``memmachine serve`` runs (same settings, same startup and shutdown),
bound to a free loopback port unless told otherwise.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from memmachine.config import Settings
from memmachine_server.app import create_app

__all__ = ["serve_in_background"]


@contextmanager
def serve_in_background(
    settings: Settings, *, host: str = "127.0.0.1", port: int = 0, startup_timeout: float = 60
) -> Iterator[str]:
    """Serve the app for ``settings`` on ``host``:``port`` (0: a free port) from a daemon
    thread; yield its base URL once it accepts requests; on exit stop it, closing its
    stores (the embedded FalkorDB child included). ``RuntimeError`` when it does not start
    within ``startup_timeout`` seconds."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    bound = listener.getsockname()[1]
    config = uvicorn.Config(create_app(settings), log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listener]}, name="memmachine-server", daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the memmachine server did not start (see its log above)")
            time.sleep(0.05)
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        listener.close()
