"""How call languages are named to members (cogs/_language.py): their own name, then the member's word for it."""

from __future__ import annotations

from bot.i18n import words_for
from cogs._language import MEMBER_LANGUAGE_CHOICES, chosen, label


def test_a_language_is_named_in_itself_and_in_the_members_language() -> None:
    assert label("es", words_for("en-US")) == "Español (Spanish)"
    assert label("es", words_for("de")) == "Español (Spanisch)"
    assert label("es", words_for("es-ES")) == "Español"
    assert label("en", words_for("en-GB")) == "English"
    assert label("xx", words_for("en-US")) == "xx", "a code from another version of the bot is shown as it is"


def test_automatic_drops_the_choice_and_every_language_is_offered() -> None:
    assert chosen("auto") is None and chosen("de") == "de"
    assert [c.value for c in MEMBER_LANGUAGE_CHOICES][:3] == ["auto", "en", "es"]
    assert len(MEMBER_LANGUAGE_CHOICES) == 17
