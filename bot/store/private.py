"""Files and folders the bot creates are its own user's alone: members' memory, the key store, the webhook inbox,
backups and the lock file are 0600, and folders the bot creates 0700, whatever the umask (a default umask gives
0644 files in 0755 folders, readable by every local user)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

FILE_MODE = 0o600
FOLDER_MODE = 0o700


def private_folder(path: Path) -> None:
    """Create ``path`` and any missing parents owner-only; folders that exist already are left as they are."""
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=FOLDER_MODE)
        except FileExistsError:
            continue
        os.chmod(folder, FOLDER_MODE)  # mkdir's mode is filtered by the umask


def private_file(path: Path) -> None:
    """Create ``path`` empty and owner-only if it is missing, in an owner-only folder (SQLite then keeps the mode,
    and gives its -wal and -shm files the same one); an existing file readable by others is made owner-only."""
    private_folder(path.parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE))
        os.chmod(path, FILE_MODE)
        return
    except FileExistsError:
        tighten(path)


def tighten(path: Path) -> None:
    """An existing file of this user that others may read (made by an older version) becomes owner-only."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    if stat.S_ISREG(info.st_mode) and info.st_mode & 0o077 and info.st_uid == os.geteuid():
        os.chmod(path, stat.S_IMODE(info.st_mode) & ~0o077)
        log.debug("%s was readable by other users of this machine: it is now its owner's alone", path)
