"""Prompts are functions that return typed results.

A :class:`Prompt` pairs fixed instructions with the pydantic type the answer must validate
as; :meth:`Prompt.run` sends them, with the user text built from typed inputs, to a
:class:`~memmachine.ports.LanguageModel`'s ``complete_structured`` (which extracts, repairs,
validates and retries). A public prompt function (``summarise_messages``) takes typed inputs,
renders them, runs its ``Prompt`` and post-checks the result against the inputs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic

from pydantic import BaseModel, Field

from memmachine.errors import InvalidInputError
from memmachine.ports import ChatMessage, LanguageModel, ResultT

__all__ = ["Prompt", "PromptMessage", "Summary", "summarise_messages"]


@dataclass(frozen=True, slots=True)
class Prompt(Generic[ResultT]):
    """Fixed ``instructions`` (the system message) and the ``result_type`` of the answer.

    ``retries`` is how many times an unusable answer is sent back with the error.
    """

    name: str
    instructions: str
    result_type: type[ResultT]
    retries: int = 2

    def messages(self, user: str) -> list[ChatMessage]:
        """The chat messages for one call: the instructions, then ``user``."""
        return [
            {"role": "system", "content": self.instructions},
            {"role": "user", "content": user},
        ]

    async def run(self, model: LanguageModel, user: str) -> ResultT:
        """Ask ``model``; return its validated answer.

        Raises :class:`~memmachine.errors.ModelOutputError` when no answer validates and
        :class:`~memmachine.errors.StoreError` when the model cannot be reached.
        """
        return await model.complete_structured(
            self.messages(user), self.result_type, retries=self.retries
        )


# ---------------------------------------------------------------------- summarise


class PromptMessage(BaseModel):
    """One message of a transcript given to a prompt; ``id`` is how the answer cites it."""

    id: str
    role: str
    content: str
    producer: str | None = None


class Summary(BaseModel):
    """A summary of some messages and the ids of the messages it covers."""

    text: str = Field(description="the summary, in plain prose")
    covered_ids: list[str] = Field(
        default_factory=list, description="ids of the messages the summary covers"
    )


_SUMMARISE = Prompt(
    name="summarise_messages",
    instructions=(
        "You summarise part of a conversation between a user and an AI assistant so that "
        "the assistant can continue it without the original messages. Keep names, numbers, "
        "dates, decisions, preferences and open questions; drop greetings and filler. "
        "Write in the third person and never invent anything. "
        "In covered_ids list the id of every message the summary accounts for."
    ),
    result_type=Summary,
)


async def summarise_messages(
    model: LanguageModel,
    messages: Sequence[PromptMessage],
    max_words: int = 150,
    *,
    previous_summary: str | None = None,
) -> Summary:
    """Summarise ``messages`` (folding in ``previous_summary``) in at most ``max_words``.

    ``covered_ids`` keeps only ids of the given messages, each once, in input order.
    Raises :class:`InvalidInputError` for no messages or ``max_words`` under 1, and what
    :meth:`Prompt.run` raises.
    """
    if not messages:
        raise InvalidInputError("there are no messages to summarise", field="messages")
    if max_words < 1:
        raise InvalidInputError("max_words must be at least 1", field="max_words")
    transcript = "\n".join(
        json.dumps(message.model_dump(exclude_none=True), ensure_ascii=False)
        for message in messages
    )
    parts = []
    if previous_summary:
        parts.append(f"Summary of the conversation so far:\n{previous_summary}\n")
    parts.append(f"Messages, one JSON object per line:\n{transcript}\n")
    parts.append(f"Write the summary in at most {max_words} words.")
    summary = await _SUMMARISE.run(model, "\n".join(parts))
    cited = set(summary.covered_ids)
    covered = list(dict.fromkeys(m.id for m in messages if m.id in cited))
    return summary.model_copy(update={"covered_ids": covered})
