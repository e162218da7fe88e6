"""A durable local inbox for Agora webhook deliveries.

A verified delivery is written here (atomically, fsynced) before it is processed and removed once processed, so
a notice that arrived is never lost to a transient database error (a lock held longer than the busy timeout, a
full disk): it is processed again by the periodic sweep and at the next start. The bot also answers such a
delivery with a 5xx, so Agora sends it again; de-duplication by notice id makes the copies harmless.

A delivery can carry what a member said (the history notice holds the transcript), and it is not yet attributed to
a member, so it cannot be sealed with a member's key. With member encryption on (a master key), each kept delivery
is sealed with a key derived from the master key (``bot.keys.crypto.InboxSealer``; ``<hmac>.sealed``) and so no
member text is on disk in the clear; without one it is kept as it came (``<sha256>.json``).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from bot.keys.crypto import InboxSealer
from bot.store.private import FILE_MODE, private_folder

log = logging.getLogger(__name__)


SEALED, PLAIN = ".sealed", ".json"


class WebhookInbox:
    def __init__(self, directory: Path | None, *, master_key: bytes | None = None):
        self.directory = directory
        self._sealer = InboxSealer(master_key) if master_key is not None else None

    @classmethod
    def beside(cls, database_path: Path | str, *, master_key: bytes | None = None) -> WebhookInbox:
        """The inbox directory next to the database file (none for an in-memory database)."""
        path = Path(database_path)
        if str(path) == ":memory:":
            return cls(None, master_key=master_key)
        return cls(path.with_name(path.name + ".webhook-inbox"), master_key=master_key)

    def put(self, raw_body: bytes) -> Path | None:
        """Keep a delivery; None when it could not be written (the caller must then not answer 200)."""
        if self.directory is None:
            return None
        if self._sealer is not None:
            name, suffix, content = self._sealer.name(raw_body), SEALED, self._sealer.seal(raw_body)
        else:
            name, suffix, content = hashlib.sha256(raw_body).hexdigest(), PLAIN, raw_body
        target = self.directory / f"{name}{suffix}"
        temporary = self.directory / f".{name}.tmp"
        try:
            private_folder(self.directory)
            with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE), "wb") as handle:
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, target)
        except OSError as exc:
            log.warning("could not keep an Agora webhook in the inbox %s: %s", self.directory, exc)
            temporary.unlink(missing_ok=True)
            return None
        return target

    def pending(self) -> list[Path]:
        if self.directory is None or not self.directory.is_dir():
            return []
        kept = [p for p in self.directory.iterdir() if p.suffix in (SEALED, PLAIN) and not p.name.startswith(".")]
        return sorted(kept, key=lambda p: p.stat().st_mtime)

    def read(self, path: Path) -> bytes:
        """A kept delivery's body. ``OSError`` when it cannot be read, ``ValueError`` when a sealed one does not
        open (sealed under a master key since rotated, or damaged); a plain one from before encryption reads as
        it is."""
        content = path.read_bytes()
        if path.suffix != SEALED:
            return content
        if self._sealer is None:
            raise ValueError("a sealed delivery, but memory.master_key (MEMORY_MASTER_KEY) is not set")
        return self._sealer.open(content)

    def remove(self, path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not remove processed webhook %s from the inbox: %s", path.name, exc)
