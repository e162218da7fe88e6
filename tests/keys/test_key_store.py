"""The member key store: kept apart, wrapped by the master key, shredded for real, rotated without data changes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import aiosqlite
import pytest

from bot.keys.crypto import DecryptionFailed, generate_master_key_text, parse_master_key
from bot.keys.store import KeyStoreLocked, SqliteKeyStore, check_unlockable

MARKER = "Marker-Quokka-5521 lives on Elm Street"


def new_master() -> bytes:
    return parse_master_key(generate_master_key_text())


def files_of(path: Path) -> list[Path]:
    """The key store file and its journal (whatever SQLite left beside it)."""
    return sorted(p for p in path.parent.iterdir() if p.name.startswith(path.name))


def digest_of(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files_of(path)}


async def wrapped_key(path: Path, user_id: int) -> bytes:
    """The member's wrapped key as stored (read through a connection of the test's own)."""
    async with (
        aiosqlite.connect(path) as db,
        db.execute("SELECT wrapped FROM member_keys WHERE user_id = ?", (user_id,)) as cur,
    ):
        row = await cur.fetchone()
    assert row is not None
    return bytes(row[0])


async def test_a_member_key_is_made_once_and_survives_a_restart(tmp_path: Path) -> None:
    path, master = tmp_path / "bot.keys.db", new_master()
    keys = SqliteKeyStore(path, master)
    await keys.open()
    cipher = await keys.cipher(1)
    assert cipher is not None
    blob = cipher.encrypt("turns.content", MARKER)
    assert await keys.cipher(2, create=False) is None
    assert await keys.count() == 1
    await keys.close()

    again = SqliteKeyStore(path, master)
    await again.open()
    reopened = await again.cipher(1, create=False)
    assert reopened is not None and reopened.decrypt("turns.content", blob) == MARKER
    await again.close()


async def test_deleting_a_member_key_leaves_no_copy_in_the_key_store_files(tmp_path: Path) -> None:
    path, master = tmp_path / "bot.keys.db", new_master()
    keys = SqliteKeyStore(path, master)
    await keys.open()
    for user_id in range(1, 40):  # neighbours on the same pages
        await keys.cipher(user_id)
    victim = await keys.cipher(7)
    assert victim is not None
    blob = victim.encrypt("facts.text", MARKER)
    wrapped = await wrapped_key(path, 7)
    assert any(wrapped in p.read_bytes() for p in files_of(path)), "the scan must be able to find the key"

    assert await keys.delete(7) is True
    for p in files_of(path):
        assert wrapped not in p.read_bytes(), f"{p.name} still holds the deleted member's wrapped key"
    assert await keys.cipher(7, create=False) is None
    assert not await keys.has_key(7)
    assert await keys.delete(7) is False
    await keys.close()

    # A new key made later for the same member does not open what was encrypted before.
    again = SqliteKeyStore(path, master)
    await again.open()
    fresh = await again.cipher(7)
    assert fresh is not None
    with pytest.raises(DecryptionFailed):
        fresh.decrypt("facts.text", blob)
    other = await again.cipher(8, create=False)
    assert other is not None  # every other member keeps their key
    await again.close()


@pytest.mark.parametrize("given", ["wrong", "missing"])
async def test_a_wrong_or_missing_master_key_is_refused_and_nothing_is_written(tmp_path: Path, given: str) -> None:
    path = tmp_path / "bot.keys.db"
    keys = SqliteKeyStore(path, new_master())
    await keys.open()
    await keys.cipher(1)
    await keys.close()
    before = digest_of(path)

    with pytest.raises(KeyStoreLocked) as caught:
        if given == "wrong":
            await SqliteKeyStore(path, new_master()).open()
        else:
            await check_unlockable(path, None)
    message = str(caught.value)
    assert "MEMORY_MASTER_KEY" in message and str(path) in message and "Nothing was changed" in message
    assert "\n" not in message
    assert digest_of(path) == before


async def test_no_key_store_and_no_master_key_is_not_an_error(tmp_path: Path) -> None:
    assert await check_unlockable(tmp_path / "none.keys.db", None) == 0
    assert not (tmp_path / "none.keys.db").exists()


async def test_rotation_rewraps_every_key_and_keeps_the_data_readable(tmp_path: Path) -> None:
    path, old, new = tmp_path / "bot.keys.db", new_master(), new_master()
    keys = SqliteKeyStore(path, old)
    await keys.open()
    blobs = {}
    for user_id in (1, 2, 3):
        cipher = await keys.cipher(user_id)
        assert cipher is not None
        blobs[user_id] = cipher.encrypt("turns.content", f"{MARKER} {user_id}")
    old_wrapped = [await wrapped_key(path, u) for u in (1, 2, 3)]
    assert await keys.rotate(new) == 3
    await keys.close()

    for p in files_of(path):
        for w in old_wrapped:
            assert w not in p.read_bytes()
    with pytest.raises(KeyStoreLocked):
        await SqliteKeyStore(path, old).open()
    rotated = SqliteKeyStore(path, new)
    await rotated.open()
    for user_id, blob in blobs.items():
        cipher = await rotated.cipher(user_id, create=False)
        assert cipher is not None and cipher.decrypt("turns.content", blob) == f"{MARKER} {user_id}"
    await rotated.close()


async def test_a_process_started_before_a_rotation_cannot_add_a_key_under_the_old_master_key(tmp_path: Path) -> None:
    path, old, new = tmp_path / "bot.keys.db", new_master(), new_master()
    running = SqliteKeyStore(path, old)
    await running.open()
    await running.cipher(1)
    rotating = SqliteKeyStore(path, old)
    await rotating.open()
    await rotating.rotate(new)
    await rotating.close()

    with pytest.raises(KeyStoreLocked, match="rotated"):
        await running.cipher(2)
    await running.close()
    after = SqliteKeyStore(path, new)
    await after.open()
    assert await after.count() == 1
    await after.close()
