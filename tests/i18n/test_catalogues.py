"""Every catalogue is complete: each key English has, with the same placeholders, and every plural form its rule
needs. A catalogue that lacks a key fails here, and so does one whose placeholder differs."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from bot.i18n import ENGLISH_TAG, LANGUAGES, Words, catalogues, language_of, problems, read_catalogue, words_for

HEADER = 'msgid ""\nmsgstr ""\n"Language: {tag}\\n"\n"Plural-Forms: nplurals=2; plural=(n != 1);\\n"\n\n'


def write_po(path: Path, tag: str, entries: str) -> Path:
    path.write_text(HEADER.format(tag=tag) + entries, encoding="utf-8")
    return path


@pytest.mark.parametrize("tag", [tag for tag in LANGUAGES if tag != ENGLISH_TAG])
def test_each_catalogue_has_every_english_key_with_its_placeholders(tag: str) -> None:
    every = catalogues()
    assert problems(every[tag], every[ENGLISH_TAG]) == []


def test_the_english_catalogue_is_itself_complete() -> None:
    english = catalogues()[ENGLISH_TAG]
    assert problems(english, english) == []
    assert len(english.texts) > 300 and len(english.forms) > 10


def test_a_catalogue_lacking_a_key_is_reported(tmp_path: Path) -> None:
    english = write_po(
        tmp_path / "en.po", "en", 'msgid "a.key"\nmsgstr "Hello {name}"\n\nmsgid "b.key"\nmsgstr "Bye"\n'
    )
    spanish = write_po(tmp_path / "es.po", "es", 'msgid "a.key"\nmsgstr "Hola {name}"\n')
    assert problems(read_catalogue(spanish), read_catalogue(english)) == ["es: lacks the text 'b.key'"]


def test_a_placeholder_that_differs_is_reported(tmp_path: Path) -> None:
    english = write_po(
        tmp_path / "en.po",
        "en",
        'msgid "a.key"\nmsgstr "Hello {name}"\n\n'
        'msgid "n.key"\nmsgid_plural "n.key.plural"\nmsgstr[0] "{count} call"\nmsgstr[1] "{count} calls"\n',
    )
    german = write_po(
        tmp_path / "de.po",
        "de",
        'msgid "a.key"\nmsgstr "Hallo {nme}"\n\n'
        'msgid "n.key"\nmsgid_plural "n.key.plural"\nmsgstr[0] "{count} Anruf"\nmsgstr[1] "Anrufe"\n',
    )
    assert problems(read_catalogue(german), read_catalogue(english)) == [
        "de: 'a.key' has the placeholders ['nme'], English ['name']",
        "de: 'n.key' has the placeholders [], English ['count']",
    ]


def test_discord_locales_map_onto_the_catalogues() -> None:
    assert [language_of(locale) for locale in ("es-ES", "es-419", "de", "pt-BR", "en-US", "en-GB", "fr", None)] == [
        "es",
        "es",
        "de",
        "pt",
        "en",
        "en",
        "en",
        "en",
    ]


def test_plural_forms_follow_the_catalogue_rule_and_missing_keys_fall_back_to_english() -> None:
    spanish = words_for("es-ES")
    assert [spanish.count("count.call", n) for n in (0, 1, 2)] == ["0 llamadas", "1 llamada", "2 llamadas"]
    assert [words_for("en-US").count("count.line", n) for n in (1, 7)] == ["1 line", "7 lines"]
    kept = [words_for(locale).count("calls.ended.kept", 1) for locale in ("en-US", "es-ES")]
    assert kept == [
        "**Call ended.** 1 line of the conversation was kept.",
        "**Llamada terminada.** Se guardó 1 línea de la conversación.",
    ]
    every = catalogues()
    thin = Words(replace(every["es"], texts={}), every[ENGLISH_TAG])
    assert thin("calls.already_ended") == "This call has already ended."


def test_dates_are_written_in_each_language_pattern() -> None:
    may_4 = 1777852800.0  # 2026-05-04 00:00 UTC
    assert words_for("en-US").date(may_4) == "2026-05-04"
    assert words_for("es-419").date(may_4) == "4 may 2026"
    assert words_for("de").date(may_4) == "04.05.2026"
    assert words_for("pt-BR").date(may_4) == "04/05/2026"


def test_brazilian_portuguese_counts_zero_and_one_as_singular() -> None:
    portuguese = words_for("pt-BR")
    assert [portuguese.count("count.call", n) for n in (0, 1, 2)] == ["0 ligação", "1 ligação", "2 ligações"]


@pytest.mark.parametrize("tag", LANGUAGES)
def test_command_names_and_descriptions_are_what_discord_accepts(tag: str) -> None:
    """Discord refuses a whole sync for one bad localization: names lower case, letters, digits, - and _, at most
    32 characters; descriptions 1 to 100 characters (so do the choices' names)."""
    texts = catalogues()[tag].texts
    names = {key: text for key, text in texts.items() if key.startswith("command.") and key.endswith(".name")}
    described = {key: text for key, text in texts.items() if key.startswith(("command.", "choice."))}
    described = {key: text for key, text in described.items() if key not in names}
    assert [key for key, name in names.items() if not re.fullmatch(r"[-\w]{1,32}", name) or name != name.lower()] == []
    assert [key for key, text in described.items() if not 1 <= len(text) <= 100] == []
