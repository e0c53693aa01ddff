"""The FastAPI application: routes over one MemoryManager built by the composition root."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Protocol

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response
from starlette.routing import Route

from memmachine.bootstrap import (
    build_attachments,
    build_key_store,
    build_manager,
    build_rate_limiter,
    build_telemetry,
    start_manager,
)
from memmachine.config import Settings
from memmachine.errors import NotFoundError
from memmachine.jobs import Worker
from memmachine.jobs.handlers import handlers_for
from memmachine.manager import MemoryManager
from memmachine.memory.attachments import AttachmentService
from memmachine.telemetry import Telemetry
from memmachine_sdk import models as wire
from memmachine_server.convert import health_out
from memmachine_server.errors import install_error_handlers
from memmachine_server.hosts import HostAllowList
from memmachine_server.idempotency import IdempotencyKeys
from memmachine_server.keyring import Keyring
from memmachine_server.limits import BodySizeLimit, UrlTextCheck
from memmachine_server.mcp_server import MCP_PATH, McpHttpEndpoint, scope_defaults
from memmachine_server.observability import RequestObserver, metrics_access
from memmachine_server.openapi import errors, openapi_document, operation_id
from memmachine_server.routes import (
    admin,
    attachments,
    custom,
    inspect,
    jobs,
    memories,
    procedures,
    profile,
    prompt,
    retention,
    sessions,
)
from memmachine_server.scope import keyring_of
from memmachine_server.state import AppState, app_state, manager_of
from memmachine_server.ui import mount_ui

log = logging.getLogger("memmachine.server")


class ManagerFactory(Protocol):
    """Builds the (not yet started) manager of an app, observed through ``telemetry``."""

    def __call__(
        self, settings: Settings, *, telemetry: Telemetry | None = None
    ) -> Awaitable[MemoryManager]: ...


def package_version() -> str:
    try:
        return version("memmachine-core")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0.0.0"


def create_app(
    settings: Settings | None = None,
    *,
    manager_factory: ManagerFactory = build_manager,
    manager: MemoryManager | None = None,
    telemetry: Telemetry | None = None,
) -> FastAPI:
    """Build the app. The manager is built and started (retrying stores that are not up
    yet) when the app starts (lifespan) and closed when it stops; nothing connects before
    that. A ``manager`` the caller already started is used as is, and closed by the app.

    ``telemetry`` (one per app: metrics registry and tracer) is what a given ``manager``
    was built with; without it the app makes its own (:func:`build_telemetry`) and closes it
    when it stops."""
    settings = settings or Settings()
    given = manager
    owns_telemetry = telemetry is None
    observed = telemetry if telemetry is not None else build_telemetry(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if given is not None:
            manager = given
        else:
            manager = await manager_factory(settings, telemetry=observed)
            await start_manager(manager, settings)
        keyring: Keyring | None = None
        attachment_service: AttachmentService | None = None
        try:
            report = await manager.health()
            if report.mode == "lexical-only":
                log.warning("search is %s", report.embedder.reason or "lexical-only: no embedder")
            else:
                log.info("search runs in hybrid mode with %s", report.embedder.model)
            keys = settings.api_key_tenants()
            keyring = Keyring(
                settings, build_key_store(settings), limiter=build_rate_limiter(settings)
            )
            await keyring.start()  # logs loudly when requests without a key are served
            attachment_service = build_attachments(settings, manager)
            app.state.memmachine = AppState(
                settings=settings,
                manager=manager,
                api_keys=keys,
                keyring=keyring,
                telemetry=observed,
                attachments=attachment_service,
            )
            async with (
                _in_process_worker(settings, manager, observed),
                mcp.running(app.state.memmachine),
            ):
                yield
        finally:
            if keyring is not None:
                await keyring.close()
            if attachment_service is not None:
                await attachment_service.close()
            await manager.close()
            if owns_telemetry:
                observed.close()

    app = FastAPI(
        title="memmachine",
        version=package_version(),
        summary="Working, episodic and profile memory for AI agents.",
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
    )
    app.openapi = openapi_document(app)  # type: ignore[method-assign]
    app.add_middleware(IdempotencyKeys)  # inside the size limit: it reads whole bodies
    app.add_middleware(BodySizeLimit, max_bytes=settings.limits.max_request_bytes)
    app.add_middleware(UrlTextCheck)
    app.add_middleware(HostAllowList)
    # added last, so it runs first: every request gets an id, a log line and its metrics,
    # a refused one too
    app.add_middleware(RequestObserver, metrics=observed.metrics)
    install_error_handlers(app)
    if observed.tracer is not None:
        from memmachine_server.tracing import instrument_app

        instrument_app(app, observed.tracer)

    @app.get("/health", response_model=wire.HealthResponse, tags=["health"], responses=errors(500))
    async def get_health(
        manager: MemoryManager = Depends(manager_of),  # noqa: B008
    ) -> wire.HealthResponse:
        """Liveness plus each store's state and the search mode (hybrid or lexical-only)."""
        return health_out(await manager.health(), package_version())

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        """Prometheus metrics of this process (see ``memmachine_server.observability``)."""
        state = app_state(request)
        if state.telemetry is None or state.telemetry.metrics is None:
            raise NotFoundError("metrics are off (MEMMACHINE_METRICS_ENABLED=false)")
        key = settings.metrics.key
        metrics_access(keyring_of(state), key.get_secret_value() if key else None, request.headers)
        body, content_type = await state.telemetry.metrics.render()
        return Response(body, media_type=content_type)

    app.include_router(attachments.router)
    app.include_router(memories.router)
    app.include_router(profile.router)
    app.include_router(sessions.router)
    app.include_router(prompt.router)
    app.include_router(jobs.router)
    app.include_router(admin.router)
    app.include_router(retention.router)
    app.include_router(custom.router)
    app.include_router(inspect.router)
    app.include_router(procedures.router)
    mount_ui(app)
    mcp = McpHttpEndpoint(scope_defaults(os.environ), version=package_version())
    app.router.routes.append(Route(MCP_PATH, endpoint=mcp, include_in_schema=False))
    return app


@asynccontextmanager
async def _in_process_worker(
    settings: Settings, manager: MemoryManager, telemetry: Telemetry | None = None
) -> AsyncIterator[None]:
    """Run a job worker beside the app when ``MEMMACHINE_JOBS_IN_PROCESS_WORKER`` is on (and
    there is a queue); on exit it finishes the jobs in hand, then stops."""
    if not settings.jobs.in_process_worker or manager.jobs is None:
        yield
        return
    config = settings.jobs
    worker = Worker(
        manager.jobs,
        handlers_for(manager),
        concurrency=config.concurrency,
        poll_interval=config.poll_interval_seconds,
        lease_seconds=config.lease_seconds,
        telemetry=telemetry,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop), name="memmachine-worker")
    log.info("job worker %s runs in-process", worker.worker_id)
    try:
        yield
    finally:
        stop.set()
        try:
            await task
        except Exception:
            log.exception("the in-process job worker failed")
