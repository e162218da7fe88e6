"""The bot's words in the member's language: one message catalogue per language (``bot/i18n/<language>.po``), read
once with Babel, plural forms by each catalogue's ``Plural-Forms`` rule and dates by ``babel.dates``.

Messages are looked up by key (``calls.card.ready``), not by their English sentence: the English catalogue
(``en.po``) is the reference every other catalogue matches key for key and ``{placeholder}`` for placeholder
(tests/i18n/test_catalogues.py). A key a catalogue lacks falls back to English; a key English lacks is a bug
(``KeyError``). Texts are ``str.format`` templates; Markdown in them is Discord's.

No Discord types here: the command tree's translator and the interaction's locale are ``bot.translator``'s."""

from __future__ import annotations

import functools
import gettext
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from babel import Locale
from babel.dates import format_date
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po

CATALOGUE_DIR = Path(__file__).resolve().parent
ENGLISH_TAG = "en"
LANGUAGES = ("en", "es", "de", "pt")
"""Languages with a complete catalogue: Discord's locales map onto them (``language_of``), others get English."""

Forms = tuple[str, ...]


@dataclass(frozen=True)
class Catalogue:
    """One language's messages: a key's text, or its plural forms (``forms``) and the rule that picks one."""

    tag: str
    locale: Locale
    texts: Mapping[str, str]
    forms: Mapping[str, Forms]
    plural_index: Callable[[int], int]
    num_plurals: int


def read_catalogue(path: Path) -> Catalogue:
    with path.open("rb") as file:
        catalog: Catalog = read_po(file)
    texts: dict[str, str] = {}
    forms: dict[str, Forms] = {}
    for message in catalog:
        if not message.id:
            continue  # the header
        if isinstance(message.id, tuple | list):
            forms[message.id[0]] = tuple(message.string or ())
        else:
            texts[message.id] = str(message.string)
    tag = path.stem
    return Catalogue(
        tag=tag,
        locale=Locale.parse(tag),
        texts=texts,
        forms=forms,
        plural_index=gettext.c2py(catalog.plural_expr),
        num_plurals=catalog.num_plurals,
    )


@functools.cache
def catalogues() -> Mapping[str, Catalogue]:
    """Every language's catalogue, read once per process (a few milliseconds)."""
    return {tag: read_catalogue(CATALOGUE_DIR / f"{tag}.po") for tag in LANGUAGES}


def language_of(locale: str | None) -> str:
    """The catalogue for a Discord locale (``es-ES``, ``es-419``, ``de``, ``en-GB``...) or a page's ``lang``:
    its language when a catalogue has it, else English."""
    if not locale:
        return ENGLISH_TAG
    language = locale.replace("_", "-").split("-", 1)[0].lower()
    return language if language in LANGUAGES else ENGLISH_TAG


def placeholders(text: str) -> set[str]:
    """The ``{name}`` fields of a text."""
    return {field for _, field, _, _ in string.Formatter().parse(text) if field is not None}


def problems(catalogue: Catalogue, reference: Catalogue) -> list[str]:
    """What keeps ``catalogue`` from being complete against ``reference`` (English): keys it lacks or that
    English no longer has, placeholders that differ, and plural forms short of its own rule's count."""
    found: list[str] = []
    for kind, mine, theirs in (
        ("text", catalogue.texts, reference.texts),
        ("plural", catalogue.forms, reference.forms),
    ):
        found += [f"{catalogue.tag}: lacks the {kind} {key!r}" for key in theirs if key not in mine]
        found += [f"{catalogue.tag}: has {key!r}, which English does not" for key in mine if key not in theirs]
    for key, text in catalogue.texts.items():
        if key in reference.texts:
            found += _field_mismatch(catalogue.tag, key, [text], placeholders(reference.texts[key]))
    for key, forms in catalogue.forms.items():
        if len(forms) != catalogue.num_plurals or not all(forms):
            found.append(f"{catalogue.tag}: {key!r} needs {catalogue.num_plurals} plural forms")
        if key in reference.forms:
            found += _field_mismatch(catalogue.tag, key, forms, placeholders(reference.forms[key][-1]))
    return found


def _field_mismatch(tag: str, key: str, texts: Sequence[str], english: set[str]) -> list[str]:
    return [
        f"{tag}: {key!r} has the placeholders {sorted(placeholders(text))}, English {sorted(english)}"
        for text in texts
        if placeholders(text) != english
    ]


class Words:
    """What the bot says in one language: ``words("key", name=value)``, ``words.count("key", n)``,
    ``words.date(ts)``."""

    def __init__(self, catalogue: Catalogue, english: Catalogue | None = None):
        self.catalogue = catalogue
        self.english = english or catalogue
        self.language = catalogue.tag
        self.locale = catalogue.locale

    def text(self, key: str) -> str:
        """The raw template of ``key`` (English when this catalogue lacks it)."""
        found = self.catalogue.texts.get(key)
        return found if found is not None else self.english.texts[key]

    def __call__(self, key: str, /, **fields: object) -> str:
        return self.text(key).format(**fields)

    def count(self, key: str, n: int, /, **fields: object) -> str:
        """A counted phrase ("1 call", "2 calls"): the plural form this language's rule picks for ``n``, with
        ``{count}`` (and any other field) filled in."""
        if key in self.catalogue.forms:
            forms, rule = self.catalogue.forms[key], self.catalogue.plural_index
        else:
            forms, rule = self.english.forms[key], self.english.plural_index
        template = forms[min(rule(n), len(forms) - 1)]
        return template.format(count=n, **fields)

    def date(self, ts: float) -> str:
        """A calendar date (UTC) for places where Discord renders no timestamp, in this language's pattern
        (``format.date``: 2026-05-04 in English, 4 may 2026 in Spanish, 04.05.2026 in German)."""
        day = datetime.fromtimestamp(ts, UTC).date()
        return format_date(day, self.text("format.date"), locale=self.locale)

    def prefixed(self, prefix: str) -> dict[str, str]:
        """Every text whose key starts with ``prefix`` (the call page's words), English filling any gap."""
        keys = [key for key in self.english.texts if key.startswith(prefix)]
        return {key: self.text(key) for key in keys}


def words_for(locale: str | None) -> Words:
    """The words for a Discord locale or language tag; English for anything without a catalogue."""
    return _words(language_of(locale))


@functools.cache
def _words(tag: str) -> Words:
    every = catalogues()
    return Words(every[tag], every[ENGLISH_TAG])


def english() -> Words:
    return words_for(ENGLISH_TAG)
