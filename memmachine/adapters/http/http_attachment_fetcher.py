"""Fetches attachments by ``http(s)`` URL with httpx: no redirects, a byte cap while reading,
and an optional allow-list of host names."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

import httpx

from memmachine.errors import InvalidInputError, PayloadTooLargeError

__all__ = ["HttpAttachmentFetcher"]


class HttpAttachmentFetcher:
    """An :class:`~memmachine.ports.AttachmentFetcher`; ``hosts`` (lower-case names) limits
    the hosts it fetches from when not empty."""

    name = "http"

    def __init__(self, *, hosts: Sequence[str] = (), timeout: float = 20.0) -> None:
        self.hosts = frozenset(host.lower() for host in hosts)
        self.timeout = timeout

    async def fetch(self, url: str, *, max_bytes: int, field: str) -> tuple[bytes, str | None]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInputError("the URL must be http:// or https://", field=field)
        if self.hosts and parts.hostname.lower() not in self.hosts:
            raise InvalidInputError(f"fetching from {parts.hostname!r} is not allowed", field=field)
        body = bytearray()
        try:
            async with (
                httpx.AsyncClient(timeout=self.timeout, follow_redirects=False) as client,
                client.stream("GET", url) as response,
            ):
                if response.status_code != 200:
                    raise InvalidInputError(
                        f"fetching the URL answered HTTP {response.status_code}", field=field
                    )
                async for chunk in response.aiter_bytes():
                    body.extend(chunk)
                    if len(body) > max_bytes:
                        raise PayloadTooLargeError(
                            f"the attachment is larger than {max_bytes} bytes", field=field
                        )
                kind = response.headers.get("content-type")
        except httpx.HTTPError:
            raise InvalidInputError("the URL could not be fetched", field=field) from None
        mime = kind.split(";")[0].strip().lower() if kind else None
        return bytes(body), mime or None
