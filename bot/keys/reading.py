"""How the encrypting layer opens what it reads and which key a write seals with (the base of every part of
``EncryptedStore``), and what it does with a value that does not open.

A value that does not open with the cached key is tried once more with the member's key read afresh from the
key store: another process may have forgotten the member and a new key been made since (``CachingKeyStore``).

A value that does not open with the member's current key, or of a member who has no key, was sealed under a key
that no longer exists: it is forgotten data (a copy of the database from before a forget, or a line an older
version sealed under a key another process had just deleted, issue 33). It is left out of what is read, as if it
were gone (a line or fact is not returned, a summary reads as none, a conversation's first line is skipped), with
a warning that names the member and the column, never the text, instead of failing every later read of the member.
It stays in the database, unreadable, until the member's next forget (which deletes every row of theirs) or
``python -m bot forget-unreadable --yes``; a member who has such rows, no key at all and was never forgotten
(keys lost with the key store) stops ``check`` and ``run`` (``bot.keys.lost``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bot.keys.crypto import DecryptionFailed, MemberCipher
from bot.keys.records import GREETING_FOLLOW_UP, GREETING_NAME, TURN, _Row, _with
from bot.keys.sealed import unseal
from bot.keys.terms import hashed_query
from bot.store.columns import turn_record
from bot.store.models import FactRecord, PreparedGreeting, RecentLines, TurnRecord

if TYPE_CHECKING:
    from bot.keys.store import KeyStore
    from bot.store.repository import Backend

log = logging.getLogger(__name__)


class ReadKeys:
    """The ciphers of one read, per member: the cached one first, read afresh at most once when a value does not
    open with it. ``left_out`` counts the values that opened with neither."""

    def __init__(self, keys: KeyStore):
        self.keys = keys
        self.ciphers: dict[int, MemberCipher | None] = {}
        self._fresh: set[int] = set()
        self.left_out: dict[tuple[int, str], int] = {}

    async def cipher(self, user_id: int) -> MemberCipher | None:
        """The member's cipher for this read (the cached one, until a value does not open with it)."""
        if user_id not in self.ciphers:
            self.ciphers[user_id] = await self.keys.cipher(user_id, create=False)
        return self.ciphers[user_id]

    async def open(self, user_id: int, column: str, value: str) -> str | None:
        """The plain text, or None when the value does not open with the member's current key (or they have none)."""
        cipher = await self.cipher(user_id)
        if cipher is not None:
            try:
                return unseal(cipher, column, value)
            except DecryptionFailed:
                pass
        if user_id not in self._fresh:
            self._fresh.add(user_id)
            again = self.ciphers[user_id] = await self.keys.cipher(user_id, create=False, fresh=True)
            if again is not None:
                try:
                    return unseal(again, column, value)
                except DecryptionFailed:
                    pass
        self.left_out[user_id, column] = self.left_out.get((user_id, column), 0) + 1
        return None

    def report(self) -> None:
        for (user_id, column), count in self.left_out.items():
            log.warning(
                "%d value(s) of %s of member %d were sealed under a key that no longer exists (forgotten data): "
                "left out of what was read",
                count,
                column,
                user_id,
            )


class OpenedReads:
    """The backend the layer stands in front of and the member keys; each part of ``EncryptedStore`` builds on
    this."""

    def __init__(self, backend: Backend, keys: KeyStore):
        self.backend = backend
        self.keys = keys

    async def _writer(self, user_id: int, generation: int | None = None) -> MemberCipher:
        """The key a write seals with. ``generation``: the one the write's fence checks, so the cached key
        serves only if it was read from the key store after that generation was seen (``CachingKeyStore``);
        a write without a fence reads the key from the key store."""
        cipher = await self.keys.cipher(user_id, create=True, generation=generation, fresh=generation is None)
        assert cipher is not None
        return cipher

    async def _hashed_query(self, user_id: int, query: str) -> str | None:
        """``query``'s terms as the member's keyed hashes, which is what the backend's index holds; None when
        the member has no key or the query no term."""
        cipher = await self._reader(user_id)
        return None if cipher is None else hashed_query(cipher, query)

    async def _reader(self, user_id: int) -> MemberCipher | None:
        return await self.keys.cipher(user_id, create=False)

    async def _open_text(self, user_id: int, column: str, value: str) -> str | None:
        """One value opened; None when it was sealed under a key that no longer exists."""
        keys = ReadKeys(self.keys)
        text = await keys.open(user_id, column, value)
        keys.report()
        return text

    async def _open_all(self, records: Sequence[_Row], field: str, column: str) -> list[_Row]:
        """Copies of ``records`` with ``field`` opened, leaving out those that do not open; one key lookup per
        member, not per row."""
        keys = ReadKeys(self.keys)
        ciphers = keys.ciphers
        opened = []
        for record in records:
            user_id, value = record.user_id, getattr(record, field)
            cipher = ciphers[user_id] if user_id in ciphers else await keys.cipher(user_id)
            try:
                if cipher is None:
                    raise DecryptionFailed(user_id, column)
                text: str | None = unseal(cipher, column, value)
            except DecryptionFailed:
                text = await keys.open(user_id, column, value)  # the key read afresh, or left out
            if text is not None:
                opened.append(_with(record, field, text))
        keys.report()
        return opened

    async def _sampled(self, user_id: int, column: str, value: str) -> tuple[MemberCipher, str] | None:
        """The cipher to open the member's values lazily with, checked on one of them (``value``, returned
        opened): None when it does not open, and the read is then opened at once (``_open_all``, which leaves out
        what does not). A key cached from before a forget elsewhere is replaced here, not at a lazy read."""
        keys = ReadKeys(self.keys)
        text = await keys.open(user_id, column, value)
        cipher = keys.ciphers.get(user_id)
        if text is None or cipher is None:
            keys.report()
            return None
        return cipher, text

    async def _recent_opened(self, recent: RecentLines) -> RecentLines:
        """``recent`` with every line opened now, those that do not open left out."""
        opened = await self._open_all([turn_record(row) for row in recent.rows], "content", TURN)
        by_id = {turn.turn_id: turn for turn in opened}
        kept = [row for row in recent.rows if row[RecentLines.TURN_ID] in by_id]
        return RecentLines(kept, lambda row: by_id[row[RecentLines.TURN_ID]])

    async def _turns(self, turns: Sequence[TurnRecord]) -> list[TurnRecord]:
        return await self._open_all(turns, "content", TURN)

    async def _fact(self, fact: FactRecord | None) -> FactRecord | None:
        opened = [] if fact is None else await self._facts([fact])
        return opened[0] if opened else None

    async def _facts(self, facts: Sequence[FactRecord]) -> list[FactRecord]:
        return await self._open_all(facts, "text", "facts.text")

    async def _greeting(self, user_id: int, greeting: PreparedGreeting | None) -> PreparedGreeting | None:
        """``greeting`` opened; None when it was sealed under a key that no longer exists."""
        if greeting is None:
            return None
        keys = ReadKeys(self.keys)
        name = None if greeting.name is None else await keys.open(user_id, GREETING_NAME, greeting.name)
        follow_up = (
            None if greeting.follow_up is None else await keys.open(user_id, GREETING_FOLLOW_UP, greeting.follow_up)
        )
        keys.report()
        if (name is None) != (greeting.name is None) or (follow_up is None) != (greeting.follow_up is None):
            return None
        return dataclasses.replace(greeting, name=name, follow_up=follow_up)


__all__ = ["OpenedReads", "ReadKeys"]
