"""A durable local inbox for Agora webhook deliveries.

A verified delivery is written here (atomically, fsynced) before it is processed and removed once processed, so
a notice that arrived is never lost to a transient database error (a lock held longer than the busy timeout, a
full disk): it is processed again by the periodic sweep and at the next start. The bot also answers such a
delivery with a 5xx, so Agora sends it again; de-duplication by notice id makes the copies harmless.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


class WebhookInbox:
    def __init__(self, directory: Path | None):
        self.directory = directory

    @classmethod
    def beside(cls, database_path: Path | str) -> WebhookInbox:
        """The inbox directory next to the database file (none for an in-memory database)."""
        path = Path(database_path)
        if str(path) == ":memory:":
            return cls(None)
        return cls(path.with_name(path.name + ".webhook-inbox"))

    def put(self, raw_body: bytes) -> Path | None:
        """Keep a delivery; None when it could not be written (the caller must then not answer 200)."""
        if self.directory is None:
            return None
        name = hashlib.sha256(raw_body).hexdigest()
        target = self.directory / f"{name}.json"
        temporary = self.directory / f".{name}.tmp"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(temporary, "wb") as handle:
                handle.write(raw_body)
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
        return sorted(self.directory.glob("*.json"), key=lambda p: p.stat().st_mtime)

    def remove(self, path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not remove processed webhook %s from the inbox: %s", path.name, exc)
