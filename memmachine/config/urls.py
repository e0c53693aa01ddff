"""Store URLs and their credentials: which part of a URL wins, and how a URL is shown
without its secrets."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from pydantic import SecretStr

__all__ = [
    "Credentials",
    "plain",
    "redact_url",
    "resolve_credentials",
    "url_address",
    "url_password",
    "with_password",
    "without_userinfo",
]


_DEFAULT_PORTS = {
    "neo4j": 7687,
    "bolt": 7687,
    "redis": 6379,
    "rediss": 6379,
    "falkordb": 6379,
    "falkordbs": 6379,
    "postgresql": 5432,
    "postgres": 5432,
}
_REDIS_SCHEMES = frozenset({"redis", "rediss", "falkordb", "falkordbs"})
_SECRET_QUERY_KEYS = frozenset({"password", "passwd", "pwd", "sslpassword", "auth"})
_MASK = "***"


@dataclass(frozen=True)
class Credentials:
    """A store's user and password after merging the URL with the separate variables."""

    user: str | None
    password: SecretStr | None
    #: True when the URL carried a password and a separate variable was ignored because of it.
    variable_ignored: bool = False


def resolve_credentials(
    url: str, user: str | None = None, password: SecretStr | None = None
) -> Credentials:
    """The URL's userinfo wins for each part it carries; the variables fill in the rest."""
    url_user, url_password = _url_userinfo(url)
    variable_password = plain(password)
    chosen_password = url_password or variable_password
    return Credentials(
        user=url_user or (user.strip() if user and user.strip() else None),
        password=SecretStr(chosen_password) if chosen_password else None,
        variable_ignored=bool(url_password and variable_password),
    )


def redact_url(url: str) -> str:
    """``url`` with its password (userinfo or query) replaced by ``***``; user, host, port,
    path and the other query parameters stay readable."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    userinfo, at, host = netloc.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:{_MASK}@{host}" if colon else f"{user}@{host}"
        if not colon and parts.scheme.split("+")[0] in _REDIS_SCHEMES:
            netloc = f"{_MASK}@{host}"  # redis-py reads a lone userinfo as a password
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key.lower() in _SECRET_QUERY_KEYS for key, _ in pairs):
            query = urlencode(
                [(k, _MASK if k.lower() in _SECRET_QUERY_KEYS else v) for k, v in pairs],
                safe="*",
            )
    if (netloc, query) == (parts.netloc, parts.query):
        return url  # nothing to mask; urlunsplit would turn ``x:///p`` into ``x:/p``
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_address(url: str) -> str:
    """What to name in an error: ``host:port`` (default port filled in), a socket path for
    ``unix``-style URLs, the file for SQLite. Never a user or password."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme == "unix" or scheme.endswith("+unix"):
            return parts.path or "?"
        base = scheme.split("+")[0]
        if base == "sqlite":
            return parts.path.removeprefix("/") if parts.path.startswith("//") else parts.path
        host = parts.hostname or "localhost"
        port = parts.port or _DEFAULT_PORTS.get(base)
    except ValueError:
        return "<unparseable URL>"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}" if port else host


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` put into its userinfo (percent-encoded), user kept."""
    parts = urlsplit(url)
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    netloc = f"{user}:{quote(password, safe='')}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def without_userinfo(url: str) -> str:
    """``url`` without ``user:password@``."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _url_userinfo(url: str) -> tuple[str | None, str | None]:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None, None
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    if password is None and user is not None and parts.scheme.split("+")[0] in _REDIS_SCHEMES:
        # ``redis://secret@host``: redis-py's convention is a password, not a user
        return None, user
    return user, password


def url_password(url: str) -> str | None:
    return _url_userinfo(url)[1]


def plain(value: SecretStr | None) -> str | None:
    if value is None:
        return None
    text = value.get_secret_value().strip()
    return text or None
