"""The reasons the injection guard gives, one per kind of instruction it recognises, shared
by the rules of every language so that the same instruction gets the same reason in each."""

from __future__ import annotations

import re

__all__ = [
    "ACT_AS",
    "DISREGARD_SYSTEM",
    "FORGET",
    "IGNORE_EARLIER",
    "NEW_IDENTITY",
    "PRETEND",
    "REVEAL",
    "ROLE_MARKERS",
    "STANDING_ORDERS",
    "UNRESTRICTED_MODE",
    "Rule",
]

IGNORE_EARLIER = "asks the model to ignore its earlier instructions"
DISREGARD_SYSTEM = "asks the model to disregard its system prompt or rules"
NEW_IDENTITY = "tries to give the model a new identity"
STANDING_ORDERS = "gives the model standing orders"
ACT_AS = "asks the model to act as someone else"
PRETEND = "asks the model to pretend to be someone else"
REVEAL = "asks the model to reveal its system prompt"
ROLE_MARKERS = "contains chat-template role markers"
FORGET = "asks the model to forget what it was told"
UNRESTRICTED_MODE = "tries to switch the model into an unrestricted mode"

#: A compiled pattern and the reason given when it is found.
Rule = tuple[re.Pattern[str], str]
