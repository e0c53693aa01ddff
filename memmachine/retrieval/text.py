"""The text an episode is indexed and embedded under.

Matching on the bare message loses who said it and when: "When did Caroline go to the
support group?" names the speaker, and questions often name a month. Each episode is
therefore indexed as ``"<date> <speaker>: <content>"`` (on LoCoMo this context alone lifts
dense retrieval substantially; see bench/RESULTS.md).
"""

from __future__ import annotations

from datetime import datetime


def episode_search_text(
    content: str, *, timestamp: datetime, producer: str | None, role: str
) -> str:
    speaker = producer or role
    day = f"{timestamp.day} {timestamp:%B %Y}"
    return f"{day} {speaker}: {content}"
