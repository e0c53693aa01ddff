"""``memmachine worker``'s own ``/metrics``: a one-route HTTP server beside the worker.

A worker process has no REST app, yet its job counters (done, retries, dead letters) and its
store and model calls live in its own registry. With ``MEMMACHINE_METRICS_WORKER_PORT`` set
it serves them on ``MEMMACHINE_METRICS_WORKER_HOST`` (default loopback) without
authentication: expose that port only where the scraper runs (a pod's metrics port, not a
public Service).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from memmachine.config import MetricsSettings
from memmachine.telemetry import Metrics

__all__ = ["serve_metrics"]

log = logging.getLogger("memmachine.server")


class _Server(uvicorn.Server):
    """A uvicorn server that leaves SIGINT and SIGTERM to the worker, which stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve_metrics(metrics: Metrics | None, settings: MetricsSettings) -> AsyncIterator[None]:
    """Serve ``metrics`` at ``http://worker_host:worker_port/metrics`` inside the block;
    nothing when metrics are off or the port is 0."""
    if metrics is None or not settings.enabled or settings.worker_port == 0:
        yield
        return

    async def scrape(request: Request) -> Response:
        body, content_type = await metrics.render()
        return Response(body, media_type=content_type)

    app = Starlette(routes=[Route("/metrics", scrape)])
    server = _Server(
        uvicorn.Config(
            app,
            host=settings.worker_host,
            port=settings.worker_port,
            log_config=None,
            access_log=False,
            lifespan="off",
        )
    )
    task = asyncio.create_task(server.serve(), name="memmachine-worker-metrics")
    log.info("worker metrics on http://%s:%d/metrics", settings.worker_host, settings.worker_port)
    try:
        yield
    finally:
        server.should_exit = True
        await task
