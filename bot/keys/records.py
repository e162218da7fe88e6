"""Member records as the encrypting layer hands them out: copies with one text field opened, or opened only when
first read (a call start ranks hundreds of lines by their stored specifics and reads the text of a few dozen), and
writes sealed line by line. Split from ``bot.keys.encrypted``."""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import NoReturn, Protocol, Self, TypeVar

from bot.keys.crypto import DecryptionFailed, MemberCipher
from bot.keys.sealed import seal, unseal
from bot.keys.terms import hashed_language_terms
from bot.store.models import FactRecord, TurnRecord, TurnsWrite
from bot.store.specifics import specifics as count_specifics

TURN, FACT, CALL_SUMMARY, CHAT_SUMMARY = "turns.content", "facts.text", "calls.summary", "chats.summary"
GREETING_NAME, GREETING_FOLLOW_UP = "greetings.name", "greetings.follow_up"
"""The sealed columns, each bound into its values (associated data): a value cannot be moved to another column."""

_Record = TypeVar("_Record")


class _MemberRow(Protocol):
    @property
    def user_id(self) -> int: ...


_Row = TypeVar("_Row", bound=_MemberRow)


def _with(record: _Record, name: str, value: str) -> _Record:
    """A copy of a frozen record with one text field replaced (``dataclasses.replace`` reruns ``__init__``,
    several times slower, and this runs for every row a context reads)."""
    new = object.__new__(type(record))
    new.__dict__.update(record.__dict__)
    new.__dict__[name] = value
    return new


def _opened(turn: TurnRecord, cipher: MemberCipher) -> TurnRecord:
    return _with(turn, "content", unseal(cipher, TURN, turn.content))


class _OpenedOnRead:
    """A record whose one text field (``_text``, of ``_column``) is decrypted the first time it is read (then
    kept): the field is left out of the instance until then, so the subclass's ``cached_property`` of that name
    opens it (``_open``) and stores it in the instance. A value that does not open raises ``DecryptionFailed`` at
    that read. Equal to the opened record (the fields ``_record`` compares)."""

    _record: type
    _text: str
    _column: str
    _compared: list[str]

    @classmethod
    def of(cls, record: object, cipher: MemberCipher) -> Self:
        new = object.__new__(cls)
        values = new.__dict__
        values.update(record.__dict__)
        values["_sealed"] = values.pop(cls._text)
        values["_cipher"] = cipher
        return new

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, self._record):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._compared)

    def _open(self) -> str:
        values = self.__dict__
        return unseal(values["_cipher"], self._column, values["_sealed"])


def _compared_fields(record: type) -> list[str]:
    return [f.name for f in dataclasses.fields(record) if f.compare]


class _SealedTurn(_OpenedOnRead, TurnRecord):
    """A line whose text is opened when first read."""

    _record, _text, _column, _compared = TurnRecord, "content", TURN, _compared_fields(TurnRecord)
    __hash__ = TurnRecord.__hash__

    @cached_property
    def content(self) -> str:
        return self._open()


class _SealedFact(_OpenedOnRead, FactRecord):
    """A fact whose text is opened when first read."""

    _record, _text, _column, _compared = FactRecord, "text", FACT, _compared_fields(FactRecord)
    __hash__ = FactRecord.__hash__

    @cached_property
    def text(self) -> str:
        return self._open()


def _sealed_write(cipher: MemberCipher, write: TurnsWrite) -> TurnsWrite:
    """``write`` with every line sealed, its specifics counted from the plain text first."""
    return TurnsWrite(
        [
            dataclasses.replace(
                t,
                content=seal(cipher, TURN, t.content, indexed=True),
                specifics=count_specifics(t.content),
                language_terms=hashed_language_terms(cipher, t.content, t.language),
            )
            for t in write.inserts
        ],
        [
            dataclasses.replace(
                u,
                content=seal(cipher, TURN, u.content, indexed=True),
                specifics=count_specifics(u.content),
                language_terms=hashed_language_terms(cipher, u.content, u.language),
            )
            for u in write.updates
        ],
        write.anchored,
    )


def raise_forgotten(user_id: int, column: str) -> NoReturn:
    """A member without a key has nothing readable (their rows belong to a copy taken before a forget)."""
    raise DecryptionFailed(user_id, column)
