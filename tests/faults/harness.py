"""Tools the fault cases share: freezing a process, and counting what a client sends to a
server (a loopback TCP proxy between the two)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator

__all__ = ["WireTap", "frozen"]


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[None]:
    """``SIGSTOP`` the process for the block, ``SIGCONT`` it after (also on failure)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


class WireTap:
    """A TCP proxy on a free port of 127.0.0.1 in front of ``127.0.0.1:target_port`` that
    keeps what clients send, so a test can count how often a command went out
    (:meth:`count`) however the server fared. Used as a context manager."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sent: list[bytearray] = []
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = threading.Event()

    def __enter__(self) -> WireTap:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self._target))
            except OSError:
                client.close()
                continue
            sent = bytearray()
            with self._lock:
                self._sent.append(sent)
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, sent), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, None), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, kept: bytearray | None) -> None:
        try:
            while chunk := source.recv(65536):
                if kept is not None:
                    with self._lock:
                        kept.extend(chunk)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def count(self, marker: str) -> int:
        """How many times clients sent ``marker`` (over all their connections)."""
        needle = marker.encode()
        with self._lock:
            return sum(bytes(sent).count(needle) for sent in self._sent)
