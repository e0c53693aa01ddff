"""The ``speaker_focus`` stage: a question about one speaker searched among that speaker's turns.

"What activities does Melanie partake in?" is answered by every turn in which Melanie tells of
an activity: the pottery class, the camping trip, swimming with the kids. On LoCoMo, when a
question names one of a conversation's two speakers, 97 % of its evidence turns are that
speaker's. Yet the named speaker's turns compete in the candidate lists with every turn that
merely says the name ("Hey Melanie!") or matches the question's other words, and turns that
tell of a pottery class share nothing with "activities" but the speaker, so many of them
never reach the candidate lists at all.

When the query names some, but not all, of the speakers found (see
:func:`~memmachine.retrieval.speakers.named_speakers`) and, with ``speaker_focus_lists_only``
(the default), asks for several things (:func:`asks_for_several`: "What activities ...",
"How many ...", "What do they both ...") or for an inference about someone
(:func:`asks_to_infer`: "Would Caroline ...", "What might John's degree be in?"), the stage
fetches the dense and the full-text lists once more, ``speaker_focus_depth`` deep, keeps
only the named speakers' episodes and fuses each in as one more list weighing
``speaker_focus_weight`` for its first: among one speaker's turns the name no longer
separates anything, so they are ranked by the rest of the question. The full-text list adds
``weight * (rrf_k + 1) / (rrf_k + rank)``; the dense list adds by score, ``weight * (cosine -
cut) / (best - cut)`` where ``cut`` is the cosine at the depth the list was cut at
(:func:`~memmachine.retrieval.hops.add_scaled_list`). Each engine computes cosine in its own
float32 arithmetic (~1e-6 apart), and a rank jumps whenever two such scores cross, or cross a
tie tolerance, on one path only, which made the in-memory index and the store's scans fuse a
deep hit differently; a share by score moves only as much as the score. The score ceiling
grows by ``1 + speaker_focus_weight`` (two lists, each at most that weight, beside the two
fused ones). Duplicates are collapsed as in the candidate lists.

Asked of every question naming one speaker, the stage also reorders single-fact questions,
whose one evidence turn is often found by its words alone, and costs them more than it gains
(bench/RESULTS.md); hence the question-type gate.

Two more dense lists are opt-in, each costing one more model run on focused questions (which
put LoCoMo's CPU p95 more than 5 ms up, bench/RESULTS.md): with ``speaker_focus_unnamed`` the
deep dense list is asked with the named speakers' names taken out of the query (among one
speaker's turns the name only pulls toward the turns that say it), and with
``speaker_focus_phrase_weight`` the phrase a list question asks for (:func:`asked_for`,
"activities") is embedded alone, searched as deep, cut to the named speakers' turns and fused
by cosine like the dense list: "Went swimming with the kids" paraphrases "activities" and
shares no word with the question.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from memmachine.retrieval.evidence import Ranked
from memmachine.retrieval.hops import add_list, add_scaled_list
from memmachine.retrieval.pipeline import Search, embed_beside
from memmachine.retrieval.speakers import named_speakers, without_names

__all__ = ["SpeakerFocus", "asked_for", "asks_for_several", "asks_to_infer", "focus_speakers"]

#: A question that asks for several things: "What activities ...", "Which books has ...",
#: "What do X and Y both ...", "How many ...". "What is ..." / "What does ..." do not count.
_SEVERAL = re.compile(
    r"^\W*(?:what|which)\s+(?:\w+\s+){0,2}?\w+s\b(?<!\bis)(?<!\bwas)(?<!\bdoes)(?<!\bhas)"
    r"|\b(?:both|in common|ways|kinds|types|things|activities|events|hobbies|how many)\b",
    re.IGNORECASE,
)
#: A question that asks for an inference about someone: "Would Caroline ...", "What might
#: John's degree be in?", "Is it likely that ...", "Would Melanie be considered ...".
_INFER = re.compile(
    r"^\W*(?:would|could)\b|\b(?:likely|probably|might|considered?|potentially)\b",
    re.IGNORECASE,
)


def asks_for_several(query: str) -> bool:
    """Whether ``query`` asks for several things (a list, a count, what two have in common):
    the questions whose evidence is spread over many turns of one speaker."""
    return _SEVERAL.search(query) is not None


def asks_to_infer(query: str) -> bool:
    """Whether ``query`` asks for an inference about someone ("Would Caroline ...?"): its
    answer rests on what that person said anywhere, not on one turn."""
    return _INFER.search(query) is not None


_AUX = r"(?:does|do|did|has|have|had|is|are|was|were|would|could|can|might|will|should)"
#: The thing a list question asks for: "What (kind of) activities does ...", "Which US cities
#: has ...", "How many turtles does ..." (not "How many times").
_ASKED_FOR = re.compile(
    r"^\W*(?:(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?|how\s+many\s+(?!times\b))"
    r"((?:[\w'-]+\s+){0,2}?[\w'-]+)\s+" + _AUX + r"\b",
    re.IGNORECASE,
)


def asked_for(query: str) -> str | None:
    """The noun phrase a list question asks for ("activities" in "What activities does
    Melanie partake in?"), or None."""
    match = _ASKED_FOR.search(query)
    return match.group(1) if match else None


def focus_speakers(query: str, speakers: set[str]) -> set[str]:
    """The speakers among ``speakers`` that ``query`` names, when it names some but not all
    of them (naming everyone singles nobody out); empty otherwise."""
    named = named_speakers(query, speakers)
    return named if named and named != speakers else set()


_CAPITALISED = re.compile(r"(?<!^)(?<![.?!]\s)\b(?!I\b)[A-Z]\w*")


def _may_name_someone(query: str, named: set[str]) -> bool:
    """Whether ``query`` may name a speaker: it names the producer of a candidate found so
    far (``named``), or holds a capitalised word other than its first and "I" (a speaker
    none of whose turns are among the candidates). A query naming nobody skips the deep
    lists."""
    return bool(named) or _CAPITALISED.search(query.strip()) is not None


class SpeakerFocus:
    """The named speakers' episodes, searched deeper and fused in (``speaker_focus_weight``,
    ``speaker_focus_depth``)."""

    name = "speaker_focus"

    def applies(self, search: Search) -> bool:
        tuning = search.tuning
        if tuning.speaker_focus_weight <= 0 or not search.scores:
            return False
        return not tuning.speaker_focus_lists_only or (
            asks_for_several(search.query) or asks_to_infer(search.query)
        )

    async def run(self, search: Search) -> None:
        tuning = search.tuning
        # The deep lists cost two store searches: a question that cannot name anyone pays
        # nothing (see _may_name_someone); whether it names some but not all speakers is
        # decided below, on the deeper lists too. Each speaker is matched against the query
        # once: the candidates' producers here, the deep lists' new ones after the fetch.
        producers = {e.producer for e in search.candidates() if e.producer}
        named = named_speakers(search.query, producers)
        if not _may_name_someone(search.query, named):
            return
        depth = max(tuning.speaker_focus_depth, search.depth)
        dense, found, phrased = await _deep_lists(search, named, depth)
        # the speakers of the deeper lists: the named one may be missing from the shallow ones
        deeper = {e.producer for e, _ in [*dense, *found, *phrased] if e.producer} - producers
        named |= named_speakers(search.query, deeper)
        if not named or named == producers | deeper:  # nobody, or everyone, singled out
            return

        def theirs(ranked: Ranked) -> Ranked:
            return [(episode, score) for episode, score in ranked if episode.producer in named]

        weight = tuning.speaker_focus_weight
        # The dense lists by score, from 0 at the depth they were cut at to the weight for
        # their best: the engines' float32 cosines differ by ~1e-6, and a rank jumps when two
        # of them cross (see add_scaled_list). Full-text scores agree to ~1e-13: by rank.
        add_scaled_list(search, "speaker_vector", theirs(dense), weight, _cut(dense))
        add_list(search, "speaker_fulltext", theirs(found), weight)
        search.ceiling *= 1 + weight
        if phrased:
            share = tuning.speaker_focus_phrase_weight
            add_scaled_list(search, "speaker_phrase", theirs(phrased), share, _cut(phrased))
            search.ceiling *= 1 + share / (2 + 2 * weight)


def _cut(ranked: Ranked) -> float:
    """The score at the depth ``ranked`` was cut at (0 for an empty list)."""
    return ranked[-1][1] if ranked else 0.0


async def _deep_lists(search: Search, named: set[str], depth: int) -> tuple[Ranked, Ranked, Ranked]:
    """The dense and full-text lists ``depth`` deep, and the dense list of the phrase the
    query asks for (:func:`asked_for`, with ``speaker_focus_phrase_weight``; else empty).

    With ``speaker_focus_unnamed`` the dense list is asked with the ``named`` speakers'
    names taken out of the query (:func:`~memmachine.retrieval.speakers.without_names`).
    The texts that need a vector are embedded in one model run, while the full-text search
    runs."""
    tuning, store, scope = search.tuning, search.store, search.scope
    lexical = asyncio.ensure_future(store.fulltext_search(scope, search.query, depth))
    if search.query_vector is None:
        return [], await lexical, []
    unnamed = without_names(search.query, named) if tuning.speaker_focus_unnamed else ""
    unnamed = unnamed if any(ch.isalnum() for ch in unnamed) else ""
    phrase = asked_for(search.query) if tuning.speaker_focus_phrase_weight > 0 else None
    texts = [text for text in (unnamed, phrase) if text]
    vectors: list[Sequence[float]] = [search.query_vector]
    if texts and search.embedder is not None:
        embedded = iter(await embed_beside(search.embedder, texts, lexical))
        vectors = [next(embedded) if unnamed else search.query_vector, *embedded]
    derivatives = tuning.sentence_derivatives
    *dense, found = await asyncio.gather(
        *(store.vector_search(scope, vector, depth, derivatives=derivatives) for vector in vectors),
        lexical,
    )
    return dense[0], found, dense[1] if len(dense) > 1 else []
