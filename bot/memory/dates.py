"""Relative dates in a remembered line, resolved against the day it was said: so "when did I ...?" can be answered.

A line's conversation already shows its date in the memory block ("Call on 2025-03-04:"), but "I started the new
job yesterday" read months later says nothing by itself. ``resolved`` finds the common relative phrases
(yesterday, last night, tomorrow, N days ago, last/next week, month, year, last/next <weekday>) and returns a note
the block appends to the line, outside its quoted text: ``(yesterday = 2025-03-03)``. The note is built only from
this fixed vocabulary and dates, never from the member's words. Days are UTC, as the block's headers are.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import NamedTuple

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_PHRASE = re.compile(
    r"\b(?:(?P<yesterday>yesterday|last night)|(?P<tomorrow>tomorrow)"
    r"|(?P<ago>\d{1,2}|one|two|three|four|five|six|seven|eight|nine|ten) (?P<unit>days?|weeks?) ago"
    r"|(?P<which>last|next) (?P<what>week|month|year|" + "|".join(WEEKDAYS) + r"))\b",
    re.IGNORECASE,
)
_HINT = re.compile(r"yesterday|tomorrow|ago|last|next|night", re.IGNORECASE)
"""A cheap first test: most lines hold none of these words and are passed over at once."""


def _day(ts: float) -> date:
    return datetime.fromtimestamp(ts, UTC).date()


def _month_start(day: date, step: int = 0) -> date:
    """The first day of the month ``step`` months from ``day``'s."""
    months = day.year * 12 + day.month - 1 + step
    return date(months // 12, months % 12 + 1, 1)


class _Meaning(NamedTuple):
    phrase: str
    """The phrase as the note names it."""
    label: str
    """The date or period it means, as the note says it."""
    first: date
    end: date
    """The day after the period."""


def _on(phrase: str, day: date) -> _Meaning:
    return _Meaning(phrase, day.isoformat(), day, day + timedelta(days=1))


def _meaning(match: re.Match[str], said: date) -> _Meaning:
    if match["yesterday"]:
        return _on(match["yesterday"].lower(), said - timedelta(days=1))
    if match["tomorrow"]:
        return _on("tomorrow", said + timedelta(days=1))
    if match["ago"]:
        count = NUMBERS.get(match["ago"].lower()) or int(match["ago"])
        unit = match["unit"].lower().rstrip("s")
        days = count * (7 if unit == "week" else 1)
        return _on(f"{count} {unit}{'s' if count != 1 else ''} ago", said - timedelta(days=days))
    step = -1 if match["which"].lower() == "last" else 1
    what = match["what"].lower()
    phrase = f"{match['which'].lower()} {what}"
    if what == "week":
        monday = said - timedelta(days=said.weekday()) + timedelta(weeks=step)
        return _Meaning(phrase, f"the week of {monday.isoformat()}", monday, monday + timedelta(days=7))
    if what == "month":
        first = _month_start(said, step)
        return _Meaning(phrase, first.isoformat()[:7], first, _month_start(first, 1))
    if what == "year":
        year = said.year + step
        return _Meaning(phrase, str(year), date(year, 1, 1), date(year + 1, 1, 1))
    weekday = WEEKDAYS.index(what)
    days = ((said.weekday() - weekday) % 7 or 7) if step < 0 else ((weekday - said.weekday()) % 7 or 7)
    return _on(phrase, said + timedelta(days=step * days))


def resolved(text: str, spoken_at: float) -> str:
    """The note for ``text`` said at ``spoken_at``: "(yesterday = 2025-03-03; last week = the week of ...)", or ""
    when it holds no relative date."""
    if not _HINT.search(text):
        return ""
    said = _day(spoken_at)
    meanings = {m.phrase: m.label for m in (_meaning(match, said) for match in _PHRASE.finditer(text))}
    return "(" + "; ".join(f"{phrase} = {when}" for phrase, when in meanings.items()) + ")" if meanings else ""


MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH = r"(?P<month>" + "|".join(MONTHS) + "|" + "|".join(m[:3] for m in MONTHS) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_NAMED_DATES = (
    re.compile(rf"\b{_DAY}(?: of)? {_MONTH},? ?{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH} {_DAY},? ?{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_YEAR}-(?P<month_number>[01]\d)-{_DAY}\b"),
    re.compile(rf"\b{_MONTH},? {_YEAR}\b", re.IGNORECASE),
)
"""Dates an utterance names: "13 October 2023", "October 13, 2023", "9th December 2023", "2023-10-13", and months:
"February 2023". English month names only."""


_YEAR_DIGITS = re.compile(r"\d\d\d\d")
MAX_PERIODS = 4
"""The periods an utterance is read for: a few are asked about at once, an utterance naming hundreds is not a
question about each (and each is a read of the store)."""
NAMED_SLACK = 86400.0
"""A date named is widened by a day either side: a line's time is when it was said, and what happened "on the 13th"
may be told on the 14th (on LoCoMo's dated questions, 0.878 of the evidence found without it, 0.885 with it)."""


def named_periods(text: str, now: float | None = None) -> list[tuple[float, float]]:
    """The first ``MAX_PERIODS`` periods ``text`` names, as [start, end) UTC timestamps: with ``now``, the past it
    names relative to now ("yesterday", "last week", "3 days ago", "last Friday", "last month", "last year":
    ``past_periods``); then a day for a date and a month for a month and year, each widened by ``NAMED_SLACK``."""
    periods = past_periods(text, now) if now is not None else []
    if not _YEAR_DIGITS.search(text):  # every date named carries its year: most utterances are passed over at once
        return periods[:MAX_PERIODS]
    taken: list[tuple[int, int]] = []
    for pattern in _NAMED_DATES:
        for match in pattern.finditer(text):
            if any(start <= match.start() < end for start, end in taken):
                continue
            groups = match.groupdict()
            month = (
                int(groups["month_number"])
                if groups.get("month_number")
                else 1 + [m[:3] for m in MONTHS].index(groups["month"][:3].lower())
            )
            year = int(groups["year"])
            try:
                if groups.get("day"):
                    first = date(year, month, int(groups["day"]))
                    last = first + timedelta(days=1)
                else:
                    first = date(year, month, 1)
                    last = _month_start(first, 1)
            except ValueError:
                continue
            taken.append((match.start(), match.end()))
            periods.append((_stamp(first) - NAMED_SLACK, _stamp(last) + NAMED_SLACK))
            if len(periods) >= MAX_PERIODS:
                return periods[:MAX_PERIODS]
    return periods[:MAX_PERIODS]


def _stamp(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


def past_periods(text: str, now: float) -> list[tuple[float, float]]:
    """The past periods ``text`` names relative to ``now`` (``_PHRASE``; "tomorrow" and "next ..." name no time
    anything was said), as [start, end) UTC timestamps: a day, or the week, month or year."""
    if not _HINT.search(text):
        return []
    today = _day(now)
    meanings = (_meaning(match, today) for match in _PHRASE.finditer(text))
    return [(_stamp(m.first), _stamp(m.end)) for m in meanings if m.first <= today]
