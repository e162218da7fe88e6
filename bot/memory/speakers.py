"""Whose lines an utterance is about, when it names one of the two people of the member's conversations.

Two people who talk for a long time call each other by name ("Thanks, Caroline!", "Hey Mel, ..."): the name of
each is a word the other uses to address them and they do not use themselves. ``address_words`` finds such words in
the member's own lines, with no list of names. An utterance that names one side only (``named_side``) is about that
person, and what that person said first-hand is the evidence: on LoCoMo's real conversations, 95% of the lines that
answer a question naming one speaker are that speaker's own (1,004 of 1,054).

The block for such an utterance (``SideFocus``) shows that side's lines. The other side's hits still count: "What
did you research?" is how the answer two lines down is found, so such a hit brings its neighbours on the named side
instead of taking room itself; the best ``KEEP_TOP`` hits go in whoever said them. Measured on LoCoMo dev
(bench/locomo.py), evidence recall rose from 0.731 to 0.765 at 1,500 tokens (multi-hop 0.58 -> 0.65, open-domain
0.42 -> 0.50); with the other side's lines only scored down instead, it fell (0.727), because they stopped leading to
the answers.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bot.store.models import Role, TurnRecord

ADDRESS_SKEW = 3.0
"""How many times more often (per line) one side must address someone by a word than the other for it to be taken as
the other side's name ("Thanks" and "Wow" are said by both)."""
KEEP_TOP = 3
"""The best hits that go in whoever said them: a question that names one person is sometimes answered by the other
(5% of LoCoMo's evidence), most often by the line that matches best."""


_VOCATIVE = re.compile(
    r"(?:[,;:]\s*|\b(?:hey|hi|hello|thanks|thank you|bye|dear|oh|wow|congrats|congratulations|sorry)\s+)"
    r"(\w[\w'-]*)(?=\s*(?:[,!.?;:]|$))",
    re.IGNORECASE,
)
"""A word set off as a form of address: after a comma or a greeting, before punctuation or the end of the line
("Thanks, Caroline!", "Hey Mel, ..."; not at the start of a line, where "Exactly," and "Perfect!" are). Only
capitalised words count (``vocatives``)."""
_WORD = re.compile(r"\b[^\W\d_][\w'-]*")
MIN_ADDRESSES = 3
"""Fewer lines than this addressing someone by a word say nothing about whose name it is."""


@functools.lru_cache(maxsize=1 << 16)
def vocatives(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """The capitalised words ``text`` uses as a form of address (``_VOCATIVE``), lower-cased; and the words it
    writes in lower case (a name is not: "exactly" and "wow" are)."""
    addressed = frozenset(m.group(1).lower() for m in _VOCATIVE.finditer(text) if m.group(1)[0].isupper())
    return addressed, frozenset(word for word in _WORD.findall(text) if word[0].islower())


def address_words(recent: Sequence[TurnRecord], kept: dict[str, object] | None = None) -> dict[str, Role]:
    """The words the member's ``recent`` lines use to address one side, each mapped to that side: said in address by
    one side in at least ``MIN_ADDRESSES`` lines and ``ADDRESS_SKEW`` times as often (per line) as by the other, so
    not "thanks" or "wow". With ``kept`` (what is derived from the member's index), worked out once per index."""
    found = kept.get("address words") if kept is not None else None
    if isinstance(found, dict):
        return found
    lines: Counter[Role] = Counter()
    said: dict[Role, Counter[str]] = {"user": Counter(), "assistant": Counter()}
    lowered: set[str] = set()
    for turn in recent:
        lines[turn.role] += 1
        addressed, lower = vocatives(turn.content)
        said[turn.role].update(addressed)
        lowered.update(lower)
    named: dict[str, Role] = {}
    if lines["user"] and lines["assistant"]:
        for word in (said["user"].keys() | said["assistant"].keys()) - lowered:
            by_member, by_agent = said["user"][word], said["assistant"][word]
            agent_rate, member_rate = by_agent / lines["assistant"], by_member / lines["user"]
            if by_agent >= MIN_ADDRESSES and agent_rate >= ADDRESS_SKEW * member_rate:
                named[word] = "user"
            elif by_member >= MIN_ADDRESSES and member_rate >= ADDRESS_SKEW * agent_rate:
                named[word] = "assistant"
    if kept is not None:
        kept["address words"] = named
    return named


def named_side(terms: str, address: dict[str, Role]) -> Role | None:
    """The side an utterance's content words (``terms``) name, when they name one side only."""
    sides = {address[word] for word in terms.split() if word in address}
    return sides.pop() if len(sides) == 1 else None


@dataclass(frozen=True)
class SideFocus:
    """How a query-aware block treats each line when the utterance names ``side`` (None: every line as it is)."""

    side: Role | None
    top: frozenset[int] = frozenset()
    """Turn ids of the best ``KEEP_TOP`` hits, which go in whoever said them."""

    @classmethod
    def of(cls, side: Role | None, ranked: Sequence[tuple[TurnRecord, float]]) -> SideFocus:
        if side is None:
            return cls(None)
        return cls(side, frozenset(turn.turn_id for turn, _ in ranked[:KEEP_TOP]))

    def shown(self, turn: TurnRecord) -> bool:
        """Whether ``turn`` goes in the block itself (else it only brings its neighbours)."""
        return self.side is None or turn.role == self.side or turn.turn_id in self.top

    def near(self, lines: Sequence[TurnRecord]) -> Sequence[TurnRecord]:
        """The neighbours a hit brings: with a side named, that side's only."""
        if self.side is None:
            return lines
        return [turn for turn in lines if turn.role == self.side]
