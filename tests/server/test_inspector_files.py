"""The inspector's files as the server serves them: from the package, with a policy that
lets the page load nothing but this server's own files and API."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from memmachine_server.ui import STATIC_DIR

SOURCES = Path(__file__).resolve().parents[2] / "server" / "ui" / "src"


def test_ui_redirects_to_the_page_and_serves_its_files(api: TestClient) -> None:
    moved = api.get("/ui", follow_redirects=False)
    page = api.get("/ui/")
    script = api.get("/ui/app.js")
    style = api.get("/ui/app.css")

    assert (moved.status_code, moved.headers["location"]) == (307, "/ui/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    assert '<script defer src="app.js"></script>' in page.text
    assert script.status_code == 200
    assert "javascript" in script.headers["content-type"]
    assert style.status_code == 200
    assert api.get("/ui/nothing-here.js").status_code == 404


def test_the_page_refers_to_no_other_host() -> None:
    """No CDN: every URL in the built files is this server's (the XML namespace names the
    DOM needs are identifiers, never fetched)."""
    namespaces = {
        "http://www.w3.org/1998/Math/MathML",
        "http://www.w3.org/1999/xhtml",
        "http://www.w3.org/2000/svg",
    }
    for name in ("index.html", "app.js", "app.css"):
        text = (STATIC_DIR / name).read_text(encoding="utf-8")
        urls = set(re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"')]*", text))
        assert urls <= namespaces, (name, urls - namespaces)


def test_built_page_and_style_are_the_sources() -> None:
    """The committed build is the sources' (``.ci/run`` rebuilds app.js and compares)."""
    for name in ("index.html", "app.css"):
        assert (STATIC_DIR / name).read_bytes() == (SOURCES / name).read_bytes(), name
