"""The memory inspector: a browser app served at ``/ui`` by the server itself.

Its sources live in ``server/ui/`` (TypeScript, built with esbuild); the built files are
committed in ``static/`` beside this module, so the server serves them with no build step
and no network. The page holds no data: it asks the REST API for everything, with the API
key the user enters (kept in the browser tab's ``sessionStorage``), so the inspector sees
and may change exactly what that key may.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

__all__ = ["STATIC_DIR", "UI_PATH", "mount_ui"]

UI_PATH = "/ui"
STATIC_DIR = Path(__file__).parent / "static"

#: Only this server's own files and API: no CDN, no inline script, no framing.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class _UiFiles(StaticFiles):
    """The built inspector, with the headers above on every response."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(_HEADERS)
        return response


def mount_ui(app: FastAPI) -> None:
    """Serve the inspector at ``/ui/`` (``/ui`` redirects there)."""

    @app.get(UI_PATH, include_in_schema=False)
    async def ui_root() -> RedirectResponse:
        return RedirectResponse(f"{UI_PATH}/")

    app.mount(UI_PATH, _UiFiles(directory=STATIC_DIR, html=True), name="ui")
