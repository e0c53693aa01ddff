"""A language model behind any OpenAI-compatible ``/chat/completions`` endpoint.

Works with OpenAI, Azure OpenAI (through its OpenAI-compatible ``/openai/v1`` route), vLLM,
Ollama, LiteLLM and anything else that speaks the chat-completions protocol, through the
``openai`` client.

Lifecycle: the constructor only stores settings; :meth:`OpenAILanguageModel.start` opens the
client (no request is sent) and :meth:`OpenAILanguageModel.close` closes it. A call before
``start`` opens the client on demand; a call after ``close`` fails until ``start`` again.

Structured output (:meth:`OpenAILanguageModel.complete_structured`):

1. The result type's JSON schema goes into the system prompt and the request asks for
   ``response_format={"type": "json_object"}``. A server that rejects that parameter (HTTP
   400/422 to a request that carried it) is asked again without it; when that succeeds, this
   model stops sending it.
2. The reply is read by :func:`parse_json_reply`: a fenced (```json) or surrounded JSON object
   is extracted and small slips are repaired (:func:`repair_json`).
3. The object is validated with pydantic. When reading or validation fails, the reply and the
   error go back to the model as a new turn, up to ``retries`` more times; then
   :class:`~memmachine.errors.ModelOutputError` carries the last raw reply.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import openai
from pydantic import ValidationError

from memmachine.errors import ConfigurationError, ModelOutputError, StoreError
from memmachine.ports import ChatMessage, Lifecycle, ResultT

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

__all__ = ["OpenAILanguageModel", "parse_json_reply", "repair_json"]

logger = logging.getLogger(__name__)

_STORE = "llm"
#: Sent as the bearer token to servers that need no key (the client insists on one).
_NO_KEY = "no-key"
_TOKEN_LIKE = re.compile(r"\bsk-[A-Za-z0-9_\-*.]{4,}|(?i:bearer)\s+\S+")
_FENCE = re.compile(r"```[ \t]*(?:json5?|JSON)?[ \t]*\r?\n?(.*?)```", re.DOTALL)
#: How many ``{`` positions in a reply are tried as the start of its JSON object.
_MAX_OBJECT_STARTS = 20
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_MAX_RAW_IN_ERROR = 200


class OpenAILanguageModel(Lifecycle):
    """Chat completions over an OpenAI-compatible endpoint (see the module docstring).

    * ``base_url`` is the API root (``http://localhost:11434/v1``); ``None`` means OpenAI.
    * ``api_key`` is sent as a bearer token; ``None`` sends a placeholder, which keyless
      servers (Ollama, a local vLLM) ignore.
    * Connection errors, timeouts, 408/409/429 and 5xx are retried by the client up to
      ``max_retries`` times with exponential backoff, honouring ``Retry-After``; then, and
      for any other failure, :class:`StoreError` with ``store="llm"`` is raised, naming the
      HTTP status when there is one and never containing the API key.
    """

    name = "llm"

    def __init__(
        self,
        base_url: str | None,
        model: str,
        *,
        api_key: str | None,
        timeout: float = 60.0,
        max_retries: int = 3,
        temperature: float = 0.0,
    ) -> None:
        if not model:
            raise ConfigurationError("the language model needs a model name")
        if max_retries < 0:
            raise ConfigurationError(f"llm max_retries must be 0 or more, got {max_retries}")
        if timeout <= 0:
            raise ConfigurationError(f"llm timeout must be positive, got {timeout}")
        self.base_url = base_url.rstrip("/") if base_url else None
        self.model: str = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        self._api_key = api_key or None
        self._client: openai.AsyncOpenAI | None = None
        self._closed = False
        #: Cleared once the server rejects ``response_format``.
        self._json_mode = True

    def __repr__(self) -> str:
        return f"OpenAILanguageModel(base_url={self.base_url!r}, model={self.model!r})"

    @property
    def _where(self) -> str:
        return self.base_url or "api.openai.com"

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the client. Sends no request."""
        self._closed = False
        self._ensure_client()

    async def close(self) -> None:
        """Close the client. Idempotent; calls then fail until ``start()`` again."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def _ensure_client(self) -> openai.AsyncOpenAI:
        if self._closed:
            raise StoreError("the language model client is closed", store=_STORE)
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                api_key=self._api_key or _NO_KEY,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=self.max_retries,
            )
        return self._client

    # -- completion ------------------------------------------------------------------------

    async def complete(
        self, messages: Sequence[ChatMessage], *, max_tokens: int | None = None
    ) -> str:
        """Return the assistant's reply to ``messages`` (``""`` when it sent no text).

        Raises :class:`StoreError` when the endpoint fails (see the class docstring) and
        :class:`ModelOutputError` when the response holds no choice at all.
        """
        return await self._chat(list(messages), max_tokens=max_tokens, json_mode=False)

    async def complete_structured(
        self,
        messages: Sequence[ChatMessage],
        result_type: type[ResultT],
        *,
        retries: int = 2,
    ) -> ResultT:
        """Return the model's answer to ``messages`` as a validated ``result_type``.

        Raises :class:`ModelOutputError` (with ``raw`` = the last reply) when no reply
        validates after ``retries`` corrections, :class:`StoreError` when the endpoint fails.
        """
        conversation = _with_schema(list(messages), result_type)
        attempts = max(0, retries) + 1
        raw = ""
        problem = ""
        for attempt in range(attempts):
            raw = await self._chat(conversation, max_tokens=None, json_mode=self._json_mode)
            try:
                return result_type.model_validate(parse_json_reply(raw))
            except ValueError as exc:  # ValidationError is a ValueError
                problem = _describe_problem(exc)
            logger.warning(
                "the language model %s answered unusably for %s (attempt %d of %d): %s",
                self.model,
                result_type.__name__,
                attempt + 1,
                attempts,
                problem,
            )
            conversation = [
                *conversation,
                {"role": "assistant", "content": raw},
                {"role": "user", "content": _correction(problem)},
            ]
        shown = raw if len(raw) <= _MAX_RAW_IN_ERROR else raw[:_MAX_RAW_IN_ERROR] + "..."
        raise ModelOutputError(
            f"the language model {self.model} gave no valid {result_type.__name__} after "
            f"{attempts} attempt{'s' if attempts != 1 else ''}: {problem}; last reply: {shown!r}",
            store=_STORE,
            raw=raw,
        )

    async def _chat(
        self, messages: list[ChatMessage], *, max_tokens: int | None, json_mode: bool
    ) -> str:
        """One chat completion; a rejected ``response_format`` is dropped and asked again."""
        client = self._ensure_client()
        sent = cast("list[ChatCompletionMessageParam]", messages)
        options: dict[str, Any] = {"temperature": self.temperature}
        if max_tokens is not None:
            options["max_tokens"] = max_tokens
        if json_mode:
            options["response_format"] = {"type": "json_object"}
        try:
            try:
                response = await client.chat.completions.create(
                    model=self.model, messages=sent, **options
                )
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                if not json_mode:
                    raise
                del options["response_format"]
                response = await client.chat.completions.create(
                    model=self.model, messages=sent, **options
                )
                logger.info(
                    "%s rejected response_format (HTTP %d); asking without it from now on",
                    self._where,
                    exc.status_code,
                )
                self._json_mode = False
        except openai.APIStatusError as exc:
            raise StoreError(self._describe_status(exc), store=_STORE) from None
        except openai.APITimeoutError:
            raise StoreError(
                f"the language model endpoint {self._where} timed out after "
                f"{self.timeout:g}s ({self.max_retries} retries)",
                store=_STORE,
            ) from None
        except openai.APIConnectionError as exc:
            raise StoreError(
                f"the language model endpoint {self._where} is unreachable "
                f"({self._scrub(str(exc))})",
                store=_STORE,
            ) from None
        except openai.OpenAIError as exc:
            raise StoreError(
                f"the language model request failed: {self._scrub(str(exc))}", store=_STORE
            ) from None
        if not response.choices:
            raise ModelOutputError(
                f"the language model endpoint {self._where} returned no choices",
                store=_STORE,
                raw="",
            )
        return response.choices[0].message.content or ""

    def _describe_status(self, exc: openai.APIStatusError) -> str:
        """A one-line description of a failed response: status, hint, server's message."""
        status = exc.status_code
        message = ""
        body = exc.body
        if isinstance(body, dict):
            error = body.get("error", body)
            if isinstance(error, dict):
                error = error.get("message") or error.get("detail")
            if isinstance(error, str):
                message = error
        if not message:
            message = exc.message
        message = " ".join(self._scrub(message).split())[:300]
        hint = ""
        if status in (401, 403):
            hint = " (check MEMMACHINE_LLM_API_KEY)"
        elif status == 404:
            hint = " (check MEMMACHINE_LLM_BASE_URL and MEMMACHINE_LLM_MODEL)"
        elif status == 429 or status >= 500:
            hint = f" after {self.max_retries} retries"
        text = f"the language model endpoint {self._where} answered HTTP {status}{hint}"
        return f"{text}: {message}" if message else text

    def _scrub(self, text: str) -> str:
        """Remove the API key (and anything that looks like a key) from ``text``."""
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return _TOKEN_LIKE.sub("***", text)


# ---------------------------------------------------------------------- prompting


def _with_schema(messages: list[ChatMessage], result_type: type[ResultT]) -> list[ChatMessage]:
    """Put the JSON instructions and schema into the system message (adding one if none)."""
    schema = json.dumps(result_type.model_json_schema(), separators=(",", ":"))
    instruction = (
        "Reply with exactly one JSON object and nothing else: no prose, no code fence. "
        f"It must validate against this JSON schema:\n{schema}"
    )
    if messages and messages[0].get("role") == "system":
        first = {**messages[0], "content": f"{messages[0].get('content', '')}\n\n{instruction}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": instruction}, *messages]


def _correction(problem: str) -> str:
    return (
        f"Your reply could not be used: {problem}\n"
        "Reply again with only the corrected JSON object that matches the schema."
    )


def _describe_problem(exc: ValueError) -> str:
    """A short, model-readable description of why a reply was refused."""
    if isinstance(exc, ValidationError):
        parts = []
        for error in exc.errors(include_url=False)[:10]:
            where = ".".join(str(part) for part in error["loc"]) or "(the object)"
            parts.append(f"{where}: {error['msg']}")
        return "the JSON does not match the schema: " + "; ".join(parts)
    return str(exc)


# ---------------------------------------------------------------------- JSON reading


def parse_json_reply(text: str) -> Any:
    """Read the JSON value in a model's reply.

    Tries, in order: each fenced block (```json ... ```), then the whole reply; for each,
    the text itself, then every balanced ``{...}`` inside it; each as is, then repaired by
    :func:`repair_json`. Returns the first that parses. Raises :class:`ValueError` saying
    why when none does.
    """
    candidates = [match.group(1) for match in _FENCE.finditer(text)]
    candidates.append(text)
    first_error: json.JSONDecodeError | None = None
    for candidate in candidates:
        for snippet in _snippets(candidate):
            for attempt in (snippet, repair_json(snippet)):
                try:
                    return json.loads(attempt)
                except json.JSONDecodeError as exc:
                    first_error = first_error or exc
    if "{" not in text:
        raise ValueError("the reply contains no JSON object")
    detail = f": {first_error.msg} at line {first_error.lineno}" if first_error else ""
    raise ValueError(f"the reply is not valid JSON{detail}")


def _snippets(text: str) -> Iterator[str]:
    """``text`` stripped, then each balanced ``{...}`` in it (from up to 20 start points)."""
    stripped = text.strip()
    if stripped:
        yield stripped
    start = text.find("{")
    tries = 0
    while start != -1 and tries < _MAX_OBJECT_STARTS:
        tries += 1
        end = _matching_brace(text, start)
        if end is not None:
            snippet = text[start : end + 1]
            if snippet != stripped:
                yield snippet
        start = text.find("{", start + 1)


def _matching_brace(text: str, start: int) -> int | None:
    """The index of the ``}`` closing the ``{`` at ``start``, skipping quoted strings."""
    depth = 0
    index = start
    while index < len(text):
        char = text[index]
        if char in "\"'":
            index = _string_end(text, index)
            if index < 0:
                return None
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return index if char == "}" else None
        index += 1
    return None


def _string_end(text: str, start: int) -> int:
    """The index of the quote closing the string opened at ``start``, or -1."""
    quote = text[start]
    index = start + 1
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == quote:
            return index
        index += 1
    return -1


def repair_json(text: str) -> str:
    """Fix the slips models make most in otherwise-JSON text, outside string literals:

    * single-quoted strings become double-quoted (``'it\\'s'`` → ``"it's"``);
    * the Python literals ``True``, ``False`` and ``None`` become ``true``, ``false``, ``null``;
    * a comma right before ``}`` or ``]`` is dropped.

    Anything else is left alone; the result may still be invalid JSON.
    """
    out: list[str] = []
    index = 0
    length = len(text)
    while index < length:
        char = text[index]
        if char == '"':
            end = _string_end(text, index)
            end = length - 1 if end < 0 else end
            out.append(text[index : end + 1])
            index = end + 1
        elif char == "'":
            end = _string_end(text, index)
            if end < 0:
                out.append(text[index:])
                break
            out.append(_requote(text[index + 1 : end]))
            index = end + 1
        elif char.isalpha() or char == "_":
            end = index
            while end < length and (text[end].isalnum() or text[end] == "_"):
                end += 1
            word = text[index:end]
            out.append(_PY_LITERALS.get(word, word))
            index = end
        elif char == ",":
            after = index + 1
            while after < length and text[after].isspace():
                after += 1
            if after >= length or text[after] not in "}]":
                out.append(char)
            index += 1
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _requote(body: str) -> str:
    """The body of a single-quoted string as a double-quoted JSON string."""
    out = ['"']
    index = 0
    while index < len(body):
        char = body[index]
        if char == "\\" and index + 1 < len(body):
            following = body[index + 1]
            out.append("'" if following == "'" else char + following)
            index += 2
            continue
        out.append('\\"' if char == '"' else char)
        index += 1
    out.append('"')
    return "".join(out)
