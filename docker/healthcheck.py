#!/usr/bin/env python3
"""The images' health check: exit 0 when memmachine's ``/health`` answers 200, else 1.

It asks the port the server was told to listen on (``MEMMACHINE_PORT``, default 8080) on
``MEMMACHINE_HOST``, where a wildcard address (``0.0.0.0``, ``::``, unset) means loopback.
Standard library only, so it runs in any image with the server's Python.
"""

from __future__ import annotations

import os
import sys
import urllib.request

_WILDCARDS = {"", "0.0.0.0", "::", "[::]"}  # noqa: S104 - addresses to translate, not to bind
_TIMEOUT_SECONDS = 2.5


def health_url(environ: dict[str, str]) -> str:
    """``http://host:port/health`` for the server these variables configure."""
    port = environ.get("MEMMACHINE_PORT", "").strip() or "8080"
    host = environ.get("MEMMACHINE_HOST", "").strip()
    if host in _WILDCARDS:
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    return f"http://{host}:{port}/health"


def main() -> int:
    url = health_url(dict(os.environ))
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_SECONDS) as response:  # noqa: S310
            return 0 if response.status == 200 else 1
    except Exception as exc:  # unreachable, refused, an error status: unhealthy
        print(f"memmachine health check: {url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
