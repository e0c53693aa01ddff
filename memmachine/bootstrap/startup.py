"""Starting a built manager: stores that cannot be reached yet are tried again with
exponential backoff until the startup budget is spent."""

from __future__ import annotations

import asyncio
import logging
import time

from memmachine.bootstrap.attachments import blob_address
from memmachine.bootstrap.stores import secret
from memmachine.config import Settings, resolve_credentials, url_address
from memmachine.errors import StoreUnavailableError
from memmachine.manager import MemoryManager, Resource

__all__ = ["start_manager"]

log = logging.getLogger("memmachine.bootstrap")

#: However little startup time is left, one attempt may take this long before it is abandoned.
_MIN_ATTEMPT_SECONDS = 10.0


async def start_manager(manager: MemoryManager, settings: Settings) -> None:
    """Start ``manager``'s resources and stores in order. A part that raises
    ``StoreUnavailableError`` is tried again with exponential backoff until the shared
    ``startup_timeout_seconds`` budget is spent; then ``StoreUnavailableError`` names the
    store and its host:port (never a password), and every part started so far is closed."""
    deadline = time.monotonic() + settings.startup_timeout_seconds
    targets = _targets(manager, settings)
    secrets = [*settings.secrets(), *_job_secrets(settings)]

    # The one resource bootstrap adds to a manager is the embedded FalkorDB server.
    embedded = ("embedded FalkorDB", str(settings.data_dir.expanduser().resolve() / "falkordb"))

    async def start_part(part: Resource) -> None:
        label, address = targets.get(id(part), embedded)
        await _start_with_retries(
            part,
            label=label,
            address=address,
            deadline=deadline,
            base=settings.startup_backoff_base_seconds,
            cap=settings.startup_backoff_max_seconds,
            secrets=secrets,
        )

    await manager.start(start_part)


def _job_secrets(settings: Settings) -> list[str]:
    """The job queue's passwords (the URL's and the variable's), to scrub from messages."""
    found: list[str] = []
    url = secret(settings.jobs.url)
    if url is not None:
        password = resolve_credentials(url).password
        if password is not None:
            found.append(password.get_secret_value())
    if settings.jobs.password is not None and settings.jobs.password.get_secret_value():
        found.append(settings.jobs.password.get_secret_value())
    return found


def _targets(manager: MemoryManager, settings: Settings) -> dict[int, tuple[str, str]]:
    """{id(part): (what it is, where it is)} for the messages of :func:`start_manager`."""
    data_dir = settings.data_dir.expanduser().resolve()
    embedded = f"embedded FalkorDB in {data_dir / 'falkordb'}"
    episode = secret(settings.episode_store_url)
    profile = secret(settings.profile_store_url)
    working = secret(settings.working_store_url)
    targets: dict[int, tuple[str, str]] = {
        id(manager.episodes): ("episode store", url_address(episode) if episode else embedded),
        id(manager.profile): (
            "profile store",
            url_address(profile) if profile else str(data_dir / "profile.db"),
        ),
        id(manager.working): ("working store", url_address(working) if working else embedded),
    }
    procedures = manager.procedural_service.store_or_none
    if procedures is not None:
        targets[id(procedures)] = ("procedure store", targets[id(manager.profile)][1])
    if manager.jobs is not None:
        jobs = secret(settings.jobs.url) or working
        targets[id(manager.jobs)] = ("job queue", url_address(jobs) if jobs else embedded)
    if settings.memory_types_store == "redis":
        records = url_address(working) if working else embedded
    else:
        records = str(data_dir / "memory_types.db")
    targets[id(manager.memory_types)] = ("custom memory type store", records)
    blobs = manager.episodic_service.blobs
    if blobs is not None:
        targets[id(blobs)] = ("blob store", blob_address(settings))
    if manager.idempotent.store is not None:
        where = url_address(working) if working else embedded
        targets[id(manager.idempotent.store)] = ("idempotency records", where)
    return targets


async def _start_with_retries(
    part: Resource,
    *,
    label: str,
    address: str,
    deadline: float,
    base: float,
    cap: float,
    secrets: list[str],
) -> None:
    began = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        remaining = deadline - time.monotonic()
        try:
            async with asyncio.timeout(max(remaining, _MIN_ATTEMPT_SECONDS)):
                await part.start()
        except StoreUnavailableError as exc:
            last: StoreUnavailableError = exc
        except TimeoutError:
            await _close_after_failure(part)
            last = StoreUnavailableError("connecting timed out", store=getattr(part, "name", label))
        else:
            if attempt > 1:
                log.info("%s at %s is up after %d attempts", label, address, attempt)
            return
        remaining = deadline - time.monotonic()
        reason = _scrub(last.message, secrets)
        if remaining <= 0:
            elapsed = time.monotonic() - began
            raise StoreUnavailableError(
                f"{label} at {address} is unreachable after {attempt} attempt"
                f"{'s' if attempt != 1 else ''} in {elapsed:.1f}s: {reason}",
                store=last.store,
            ) from None
        delay = min(cap, base * 2 ** (attempt - 1), remaining)
        log.warning(
            "%s at %s is not reachable yet (%s); retrying in %.1fs", label, address, reason, delay
        )
        await asyncio.sleep(delay)


async def _close_after_failure(part: Resource) -> None:
    try:
        await part.close()
    except Exception:  # best effort after an abandoned attempt
        log.debug("closing %r after a failed start failed", part, exc_info=True)


def _scrub(message: str, secrets: list[str]) -> str:
    for hidden in secrets:
        if hidden:
            message = message.replace(hidden, "***")
    return message
