"""Every REST route of the app has a method on both SDK clients, and that method's request
goes to that route: the test lists the app's routes (its OpenAPI document, plus the routes
left out of it) and fails on one with no SDK method. Only the routes in
:data:`NOT_FOR_CLIENTS` may have none."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import BaseRoute

from memmachine.config import EmbeddingSettings, Settings
from memmachine_sdk import AsyncClient, Client
from memmachine_server.app import create_app

#: Routes that are not for API clients: browsers, scrapers and the MCP transport.
NOT_FOR_CLIENTS = {
    "/metrics",  # Prometheus scrapes it
    "/ui",  # the inspector web page
    "/mcp",  # the MCP streamable-HTTP endpoint, spoken by MCP clients
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
}

#: "METHOD /path" -> (SDK method, its positional arguments, its keyword arguments).
SDK_METHODS: dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]] = {
    "GET /health": ("health", (), {}),
    "POST /v1/memories": ("add", (["hi"],), {"session_id": "s"}),
    "GET /v1/memories": ("list_episodes", (), {}),
    "POST /v1/memories/search": ("search", ("q",), {}),
    "GET /v1/memories/{episode_id}": ("get_episode", ("e1",), {}),
    "DELETE /v1/memories/{episode_id}": ("delete_episode", ("e1",), {}),
    "POST /v1/profile": ("set_profile", ([{"tag": "t", "feature": "f", "value": "v"}],), {}),
    "GET /v1/profile": ("get_profile", (), {}),
    "DELETE /v1/profile": ("delete_facts", (), {"tag": "t"}),
    "GET /v1/profile/history": ("profile_history", ("t", "f"), {}),
    "POST /v1/profile/facts/{fact_id}/invalidate": ("invalidate_fact", ("f1",), {}),
    "POST /v1/profile/search": ("search_profile", ("q",), {}),
    "GET /v1/profile/facts/{fact_id}": ("get_fact", ("f1",), {}),
    "DELETE /v1/profile/facts/{fact_id}": ("delete_fact", ("f1",), {}),
    "GET /v1/sessions/{session_id}/working": ("get_working", ("s",), {}),
    "PUT /v1/sessions/{session_id}/working": ("put_working", ("s",), {"summary": "x"}),
    "DELETE /v1/sessions/{session_id}/working": ("delete_working", ("s",), {}),
    "POST /v1/sessions/{session_id}/working/messages": ("append_working", ("s", ["m"]), {}),
    "POST /v1/sessions/{session_id}/compact": ("compact", ("s",), {}),
    "DELETE /v1/sessions/{session_id}": ("forget_session", ("s",), {}),
    "DELETE /v1/users/{user_id}": ("forget_user", ("u",), {}),
    "GET /v1/users/{user_id}": ("get_user", ("u",), {}),
    "POST /v1/memory-prompt": ("memory_prompt", ("q",), {}),
    "GET /v1/tools": ("tools", (), {}),
    "POST /v1/tools/execute": (
        "execute_tool",
        ({"id": "c1", "function": {"name": "search_memory", "arguments": "{}"}},),
        {},
    ),
    "GET /v1/jobs": ("list_jobs", (), {"status": "dead"}),
    "DELETE /v1/jobs/dead": ("purge_dead_jobs", (), {}),
    "GET /v1/jobs/{job_id}": ("get_job", ("j1",), {}),
    "POST /v1/jobs/{job_id}/replay": ("replay_job", ("j1",), {}),
    "POST /v1/admin/keys": ("create_key", (), {"tenant": "t"}),
    "GET /v1/admin/keys": ("list_keys", (), {}),
    "DELETE /v1/admin/keys/{key_id}": ("revoke_key", ("k1",), {}),
    "GET /v1/memory-types": ("memory_types", (), {}),
    "POST /v1/memory-types/{name}/store": ("store_custom", ("notes", {}), {}),
    "POST /v1/memory-types/{name}/retrieve": ("retrieve_custom", ("notes", {}), {}),
    "GET /v1/whoami": ("whoami", (), {}),
    "GET /v1/users": ("list_users", (), {}),
    "GET /v1/users/{user_id}/sessions": ("list_sessions", ("u",), {}),
    "GET /v1/users/{user_id}/timeline": ("timeline", ("u",), {}),
    "GET /v1/users/{user_id}/forget-preview": ("forget_preview", ("u",), {}),
    "GET /v1/users/{user_id}/job-counts": ("job_counts", ("u",), {}),
    "GET /v1/memories/{episode_id}/neighbours": ("neighbours", ("e1",), {}),
    "POST /v1/memories/attachments": ("upload_attachment", (b"hi",), {"filename": "a.txt"}),
    "GET /v1/memories/{episode_id}/attachment": ("download_attachment", ("e1",), {}),
    "POST /v1/procedures": ("add_procedure", ("Cancel a plan", ["Open billing"]), {}),
    "GET /v1/procedures": ("list_procedures", (), {}),
    "POST /v1/procedures/search": ("search_procedures", ("cancel",), {}),
    "GET /v1/procedures/{procedure_id}": ("get_procedure", ("p1",), {}),
    "GET /v1/procedures/{procedure_id}/history": ("procedure_history", ("p1",), {}),
    "POST /v1/procedures/{procedure_id}/uses": ("report_procedure_use", ("p1",), {"success": True}),
    "DELETE /v1/procedures/{procedure_id}": ("delete_procedure", ("p1",), {}),
    "POST /v1/sessions/{session_id}/outcome": ("set_session_outcome", ("s", "success"), {}),
    "GET /v1/admin/retention": ("get_retention", (), {}),
    "PUT /v1/admin/retention": ("set_retention", ([{"tenant": "t"}],), {}),
    "POST /v1/admin/retention/sweep": ("run_retention_sweep", (), {}),
}


class Sent(Exception):
    """Raised by the recording transport instead of answering: the request a call made."""

    def __init__(self, request: httpx.Request) -> None:
        super().__init__(f"{request.method} {request.url.path}")
        self.request = request


def _record(request: httpx.Request) -> httpx.Response:
    raise Sent(request)


@pytest.fixture(scope="module")
def app_routes(tmp_path_factory: pytest.TempPathFactory) -> tuple[set[str], set[str]]:
    """("METHOD /path" of every route in the OpenAPI document, paths of the others)."""
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("routes"), embedding=EmbeddingSettings(provider="none")
    )
    app = create_app(settings)
    documented = {
        f"{method.upper()} {path}"
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    }
    others = {_path(route) for route in app.routes} - {
        entry.split(" ", 1)[1] for entry in documented
    }
    return documented, others - {""}


def _path(route: BaseRoute) -> str:
    return str(getattr(route, "path", ""))


def test_every_documented_route_has_a_method_on_both_clients(
    app_routes: tuple[set[str], set[str]],
) -> None:
    documented, _ = app_routes
    missing = sorted(documented - SDK_METHODS.keys())
    assert not missing, f"REST routes with no SDK method: {missing}"
    stale = sorted(SDK_METHODS.keys() - documented)
    assert not stale, f"SDK methods for routes the app no longer has: {stale}"
    for route, (name, _, _) in SDK_METHODS.items():
        assert callable(getattr(Client, name, None)), f"Client has no {name} for {route}"
        method = getattr(AsyncClient, name, None)
        assert method is not None, f"AsyncClient has no {name} for {route}"
        assert inspect.iscoroutinefunction(method), f"AsyncClient.{name} is not async"


def test_routes_outside_the_openapi_document_are_only_the_allowed_ones(
    app_routes: tuple[set[str], set[str]],
) -> None:
    _, others = app_routes
    assert {"/metrics", "/ui"} <= others  # the listing does see routes outside the document
    assert others <= NOT_FOR_CLIENTS, (
        f"undocumented routes with no SDK method: {others - NOT_FOR_CLIENTS}"
    )


def _matches(request: httpx.Request, route: str) -> bool:
    verb, template = route.split(" ", 1)
    pattern = re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(template))
    return request.method == verb and re.fullmatch(pattern, request.url.path) is not None


@pytest.mark.parametrize("route", sorted(SDK_METHODS))
def test_each_sync_method_sends_its_route(route: str) -> None:
    name, args, kwargs = SDK_METHODS[route]
    transport = httpx.MockTransport(_record)
    with (
        Client("http://mm.test", user_id="u", transport=transport) as client,
        pytest.raises(Sent) as sent,
    ):
        getattr(client, name)(*args, **kwargs)
    assert _matches(sent.value.request, route), (str(sent.value), route)


@pytest.mark.parametrize("route", sorted(SDK_METHODS))
async def test_each_async_method_sends_its_route(route: str) -> None:
    name, args, kwargs = SDK_METHODS[route]
    transport = httpx.MockTransport(_record)
    async with AsyncClient("http://mm.test", user_id="u", transport=transport) as client:
        with pytest.raises(Sent) as sent:
            await getattr(client, name)(*args, **kwargs)
    assert _matches(sent.value.request, route), (str(sent.value), route)


def test_the_readme_of_the_sdk_names_every_method() -> None:
    readme = (Path(__file__).parents[2] / "sdk" / "README.md").read_text()
    unnamed = sorted(
        {name for name, _, _ in SDK_METHODS.values()} - set(re.findall(r"\w+", readme))
    )
    assert not unnamed, f"sdk/README.md does not mention: {unnamed}"
