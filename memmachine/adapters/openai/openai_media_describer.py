"""Describes attachments through an OpenAI-compatible endpoint: images by a vision chat model
(the image sent as a ``data:`` URL content part), audio by a transcription model
(``POST /audio/transcriptions``). Either model may be unset; then that modality is not
accepted and the caller must supply a caption."""

from __future__ import annotations

import base64

import openai

from memmachine.errors import StoreError
from memmachine.ports import Lifecycle

__all__ = ["DESCRIBE_IMAGE_PROMPT", "OpenAIMediaDescriber"]

_STORE = "llm"
_NO_KEY = "no-key"
#: What the vision model is asked; the answer is stored and searched as an episode.
DESCRIBE_IMAGE_PROMPT = (
    "Describe this image for a memory that will be searched by text later: what it shows, "
    "any visible text, and details a person might ask about. Answer in plain prose."
)


class OpenAIMediaDescriber(Lifecycle):
    """A :class:`~memmachine.ports.MediaDescriber` over an OpenAI-compatible endpoint.

    Errors become :class:`StoreError` (``store="llm"``) naming the HTTP status or the failure
    kind, never the API key or the endpoint's message."""

    name = "openai"

    def __init__(
        self,
        base_url: str | None,
        *,
        api_key: str | None,
        vision_model: str | None,
        transcription_model: str | None,
        timeout: float = 60.0,
        max_retries: int = 3,
    ) -> None:
        self.base_url = base_url
        self.vision_model = vision_model
        self.transcription_model = transcription_model
        self._api_key = api_key
        self._timeout = timeout
        self._max_retries = max_retries
        self._client: openai.AsyncOpenAI | None = None

    async def start(self) -> None:
        self._ensure_client()

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def _ensure_client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self._api_key or _NO_KEY,
                timeout=self._timeout,
                max_retries=self._max_retries,
            )
        return self._client

    def accepts(self, mime: str) -> bool:
        if mime.startswith("image/"):
            return self.vision_model is not None
        if mime.startswith("audio/"):
            return self.transcription_model is not None
        return False

    async def describe(self, data: bytes, mime: str, *, name: str | None = None) -> str:
        if not self.accepts(mime):
            raise StoreError(f"no model configured for {mime}", store=_STORE)
        client = self._ensure_client()
        try:
            if mime.startswith("image/"):
                assert self.vision_model is not None
                url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
                response = await client.chat.completions.create(
                    model=self.vision_model,
                    temperature=0.0,
                    messages=[
                        {
                            "role": "user",
                            "content": [
                                {"type": "text", "text": DESCRIBE_IMAGE_PROMPT},
                                {"type": "image_url", "image_url": {"url": url}},
                            ],
                        }
                    ],
                )
                text = response.choices[0].message.content if response.choices else None
            else:
                assert self.transcription_model is not None
                transcript = await client.audio.transcriptions.create(
                    model=self.transcription_model,
                    file=(name or "audio", data, mime),
                )
                text = transcript.text
        except openai.APIStatusError as exc:
            raise StoreError(
                f"the media model answered HTTP {exc.status_code}", store=_STORE
            ) from None
        except openai.APITimeoutError:
            raise StoreError("the media model timed out", store=_STORE) from None
        except openai.OpenAIError:
            raise StoreError("the media model could not be reached", store=_STORE) from None
        text = (text or "").strip()
        if not text:
            raise StoreError("the media model returned no text", store=_STORE)
        return text
