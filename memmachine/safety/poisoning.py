"""Memory-poisoning guard: spot text that addresses the model rather than records a fact.

:func:`looks_like_injection` returns a short reason when the text contains one of:

- an order to ignore / disregard / forget / override the previous, prior, above or system
  instructions (or prompt, rules, context);
- an order to disregard the system prompt, guardrails or safety rules;
- a persona switch: "you are now DAN / an unrestricted AI / in developer mode";
- "from now on, you will / must / should …";
- "act as …" / "pretend to be …" / "roleplay as …" said to the assistant (at the start of a
  sentence, or after "you", "please", "now", "I want you to"), and "pretend (that) you are";
- a request to reveal / print / repeat the system prompt or "your instructions";
- chat-template role tags: ``<|im_start|>``, ``<|system|>``, ``<|start_header_id|>``,
  ``[INST]``, ``<<SYS>>``, ``<system>``, and ``### System:`` / ``### Instruction:`` headers;
- "forget everything you were told / above / so far";
- "enable developer / DAN / jailbreak mode".

The same kinds are recognised in Chinese (:mod:`memmachine.safety.poisoning_zh`, run when the
text holds a Chinese character) and Russian (:mod:`memmachine.safety.poisoning_ru`, when it
holds a Cyrillic one), Spanish, German and French (:mod:`memmachine.safety.poisoning_european`),
each by the same test of what is aimed at the model.

Statements about the user ("I ignore my previous diet instructions", "I act as treasurer",
"my kids pretend to be pirates") do not match: each rule needs the wording aimed at the
model. Matching is case-insensitive, after NFKC normalisation and removal of zero-width
characters; every pattern is bounded, so the check is linear in the text.
"""

from __future__ import annotations

import re
import unicodedata

from memmachine.safety import poisoning_european, poisoning_ru, poisoning_zh
from memmachine.safety.poisoning_reasons import (
    ACT_AS,
    DISREGARD_SYSTEM,
    FORGET,
    IGNORE_EARLIER,
    NEW_IDENTITY,
    PRETEND,
    REVEAL,
    ROLE_MARKERS,
    STANDING_ORDERS,
    UNRESTRICTED_MODE,
    Rule,
)

__all__ = ["looks_like_injection"]

_FLAGS = re.IGNORECASE | re.MULTILINE

_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))

_DETERMINERS = r"(?:(?:all|any|the|your|these|those|every|of|its)\s{1,5}){0,3}"
_EARLIER = r"(?:previous|prior|above|earlier|preceding|foregoing|original|initial|old|existing)"
_ORDERS = (
    r"(?:instructions?|prompts?|directions?|directives?|rules|guidelines|messages?|context"
    r"|commands?|orders|programming|constraints)"
)
_IGNORE = (
    r"(?:ignore|disregard|forget|override|bypass|discard|drop|stop\s{1,5}following"
    r"|do\s{1,5}not\s{1,5}follow|don'?t\s{1,5}follow)"
)
_TO_ASSISTANT = (
    r"(?:^|[.!?;:\n]\s{0,5}|\b(?:please|now|so|okay|ok|i\s{1,5}(?:want|need)\s{1,5}you\s{1,5}to"
    r"|you(?:\s{1,5}(?:will|must|shall|should|can|are\s{1,5}to|have\s{1,5}to))?(?:\s{1,5}now)?)"
    r"[\s,]{1,5})"
)

_RULES: tuple[Rule, ...] = (
    (
        re.compile(rf"\b{_IGNORE}\s{{1,5}}{_DETERMINERS}{_EARLIER}\s{{1,5}}{_ORDERS}\b", _FLAGS),
        IGNORE_EARLIER,
    ),
    (
        re.compile(
            rf"\b{_IGNORE}\s{{1,5}}{_DETERMINERS}(?:system\s{{1,5}}(?:prompt|message|instructions?)"
            r"|guardrails?|safety\s{1,5}(?:rules|guidelines|filters?|instructions)"
            r"|developer\s{1,5}(?:instructions|message)|content\s{1,5}polic(?:y|ies))\b",
            _FLAGS,
        ),
        DISREGARD_SYSTEM,
    ),
    (
        re.compile(
            r"\byou\s{1,5}are\s{1,5}now\s{1,5}(?:(?:an?|the|in|called|named|known\s{1,5}as)"
            r"\s{1,5})?(?:(?:[\w-]{1,30}\s{1,5}){0,3}(?:ai|assistant|bot|chatbot|model|llm|gpt"
            r"|persona|character|mode)\b|dan\b|unrestricted|unfiltered|uncensored|jailbroken"
            r"|free\s{1,5}(?:from|of)\b|no\s{1,5}longer\s{1,5}(?:bound|restricted|limited"
            r"|an?\s{1,5}(?:ai|assistant)))",
            _FLAGS,
        ),
        NEW_IDENTITY,
    ),
    (
        re.compile(
            r"\bfrom\s{1,5}now\s{1,5}on,?\s{1,5}(?:you|the\s{1,5}(?:assistant|ai|model|bot))"
            r"\s{1,5}(?:will|must|shall|should|are\s{1,5}to|have\s{1,5}to|need\s{1,5}to"
            r"|only|always|never|respond|answer|reply|act|speak|obey)\b",
            _FLAGS,
        ),
        STANDING_ORDERS,
    ),
    (
        re.compile(
            rf"{_TO_ASSISTANT}(?:act|behave|respond|roleplay|role-play)\s{{1,5}}as\s{{1,5}}"
            r"(?:if\s{1,5})?\S",
            _FLAGS,
        ),
        ACT_AS,
    ),
    (
        re.compile(
            rf"{_TO_ASSISTANT}pretend\s{{1,5}}(?:to\s{{1,5}}be|that)\b"
            r"|\bpretend\s{1,5}(?:that\s{1,5})?(?:you\s{1,5}are|you're|you\s{1,5}were)\b",
            _FLAGS,
        ),
        PRETEND,
    ),
    (
        re.compile(
            r"\b(?:reveal|print|show|output|repeat|display|leak|dump|share|recite|disclose"
            r"|tell\s{1,5}me|give\s{1,5}me|write\s{1,5}out|what\s{1,5}(?:is|are|was|were))"
            r"\s{1,5}(?:me\s{1,5})?(?:(?:your|the)\s{1,5}(?:(?:full|entire|original|initial"
            r"|hidden|secret|exact|complete)\s{1,5}){0,2}(?:system\s{1,5}(?:prompt|message"
            r"|instructions?)|(?:hidden|secret|initial|original)\s{1,5}(?:prompt|instructions))"
            r"|your\s{1,5}(?:(?:full|entire|original|initial|hidden|secret|exact|complete)"
            r"\s{1,5}){0,2}(?:instructions|prompt|guidelines|rules))\b",
            _FLAGS,
        ),
        REVEAL,
    ),
    (
        re.compile(
            r"<\|\s{0,3}(?:im_start|im_end|system|user|assistant|start_header_id|end_header_id"
            r"|eot_id|endoftext)\s{0,3}\|>|\[/?INST\]|<<\s{0,3}/?SYS\s{0,3}>>|</?system>"
            r"|^[ \t]{0,3}#{2,4}[ \t]{0,3}(?:system|instructions?|assistant)[ \t]{0,3}:",
            _FLAGS,
        ),
        ROLE_MARKERS,
    ),
    (
        re.compile(
            r"\bforget\s{1,5}(?:everything|all|whatever|anything)\s{1,5}(?:(?:that|which)\s{1,5})?"
            r"(?:you(?:'ve|'re|\s{1,5}have|\s{1,5}were|\s{1,5}had|\s{1,5}are)?\s{1,5}(?:been\s{1,5})?"
            r"(?:told|taught|instructed|trained|programmed|given)"
            r"|(?:above|before|previously|prior|so\s{1,5}far|up\s{1,5}to\s{1,5}now|earlier))\b",
            _FLAGS,
        ),
        FORGET,
    ),
    (
        re.compile(
            r"\b(?:enable|enter|activate|switch\s{1,5}(?:to|into)|turn\s{1,5}on)\s{1,5}"
            r"(?:the\s{1,5})?(?:developer|dan|god|jailbreak|jailbroken|unrestricted)\s{1,5}mode\b",
            _FLAGS,
        ),
        UNRESTRICTED_MODE,
    ),
)


def looks_like_injection(text: str) -> str | None:
    """A short reason when ``text`` looks like an instruction aimed at the model, else None."""
    normalised = unicodedata.normalize("NFKC", text).translate(_ZERO_WIDTH)
    for pattern, reason in _RULES:
        if pattern.search(normalised):
            return reason
    if poisoning_zh.applies(normalised):
        for pattern, reason in poisoning_zh.RULES:
            if pattern.search(normalised):
                return reason
    if poisoning_ru.applies(normalised):
        russian = poisoning_ru.normalise(normalised)
        for pattern, reason in poisoning_ru.RULES:
            if pattern.search(russian):
                return reason
    if poisoning_european.applies(normalised):
        for pattern, reason in poisoning_european.RULES:
            if pattern.search(normalised):
                return reason
    return None
