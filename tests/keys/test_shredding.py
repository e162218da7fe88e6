"""Crypto-shredding end to end: memory written by the bot is ciphertext on disk, a copy of the database taken
before a forget stays unreadable for that member afterwards, and an unencrypted database is encrypted in place."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from bot.__main__ import main
from bot.app import open_services
from bot.config import Settings
from bot.keys import SqliteKeyStore, generate_master_key_text, parse_master_key
from bot.keys.encrypted import EncryptedStore
from bot.memory.service import MemoryService
from bot.store.models import ChatRecord
from bot.store.sqlite import SqliteStore
from bot.store.terms import index_terms
from standins.factories import make_call, seed_fact, seed_summary
from standins.harness import make_settings

GONE, KEPT = 1, 2
# Words whose porter stem differs from the word, so the scan checks the plain terms as well as the text.
SECRETS = {
    GONE: ["zorblaxing", "quindlewoods", "frabjousness", "snickersnacks"],
    KEPT: ["vorpalizing", "tumtumtrees", "jubjubbirds", "bandersnatches"],
}


def plain_terms(words: list[str]) -> set[str]:
    terms = {t for w in words for t in index_terms(w)}
    assert terms - set(words), "some stems differ from their words"
    return set(words) | terms


def files_of(folder: Path, prefix: str = "bot.db") -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.name.startswith(prefix))


async def remember(store: SqliteStore | EncryptedStore, memory: MemoryService, user_id: int) -> None:
    """A call with lines, a summary, facts (one superseded: an earlier version) and a text chat."""
    a, b, c, d = SECRETS[user_id]
    call = make_call(user_id=user_id, state="ended")
    await store.create_call(call)
    await memory.record_snapshot(
        call, [("user", f"I keep {a} near the {b}"), ("assistant", f"Noted, {a} by the {b}.")], max_history=32
    )
    await seed_summary(store, f"Talked about {a} and {c}", call_id=call.call_id)
    old = await seed_fact(store, user_id, f"Likes {c}", 1.0, call_id=call.call_id)
    await seed_fact(store, user_id, f"Likes {c} and {d}", 2.0, call_id=call.call_id, replaces=[old.fact_id])
    chat = ChatRecord(f"chat-{user_id}", user_id, None, False, 3.0, 3.0)
    await store.create_chat(chat)
    await store.append_chat_turn(chat.chat_id, user_id, "user", f"Any news about {d}?", 3.0)


def encrypted_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, memory={"database_path": str(tmp_path / "live" / "bot.db"), "master_key": KEY})


KEY = generate_master_key_text()


async def test_a_copy_taken_before_a_forget_is_unreadable_for_that_member_and_only_for_them(tmp_path: Path) -> None:
    settings = encrypted_settings(tmp_path)
    live = settings.memory.database_path.parent
    async with open_services(settings) as services:
        for user_id in (GONE, KEPT):
            await remember(services.store, services.memory, user_id)
        assert any(SECRETS[GONE][0] in t.content for t in await services.store.recent_turns_of(GONE, 10))
        found = await services.store.search_turns(GONE, "zorblax", 5)
        assert found and SECRETS[GONE][0] in found[0].content  # search works on the hashed index
    everything = files_of(live)
    assert b"Noted" not in everything and SECRETS[KEPT][0].encode() not in everything, "no plaintext is written"

    backup = tmp_path / "backup"
    backup.mkdir()
    for p in live.iterdir():
        if p.name.startswith("bot.db"):  # the memory database only: the key store is backed up apart
            shutil.copy2(p, backup / p.name)

    async with open_services(settings) as services:
        await services.memory.forget_everything(GONE)
        await services.memory.wait_scrubbed()

    for where, data in (("live", files_of(live) + files_of(live, "bot.keys.db")), ("copy", files_of(backup))):
        for user_id in (GONE, KEPT):
            for term in plain_terms(SECRETS[user_id]):
                assert term.encode() not in data, f"{where} files hold {term!r} in the clear"

    keys = SqliteKeyStore(settings.memory.key_store_path, parse_master_key(KEY))
    await keys.open()
    copy = EncryptedStore(SqliteStore(backup / "bot.db"), keys)
    await copy.open()
    try:
        await assert_readable_only_for_the_kept_member(copy)
    finally:
        await copy.backend.close()
        await keys.close()


async def assert_readable_only_for_the_kept_member(copy: EncryptedStore) -> None:
    """A copy taken before GONE was forgotten, opened with the live key store: GONE's rows are there but nothing
    of them opens; KEPT's memory reads and searches as before."""
    raw = await copy.backend.recent_turns_of(GONE, 10)
    assert len(raw) == 3, "the copy still holds the forgotten member's rows"
    assert await copy.recent_turns_of(GONE, 10) == [], "nothing of them opens: left out as forgotten (keys/reading.py)"
    assert await copy.search_turns(GONE, "zorblax", 5) == []
    gone = await copy.export_user(GONE)
    assert gone["facts"] == [] and gone["calls"] == [] and gone["chats"] == []
    assert "Nothing" in gone["note"]
    kept = json.dumps(await copy.export_user(KEPT))
    for word in SECRETS[KEPT]:
        assert word in kept
    assert sorted(f.text for f in await copy.list_facts(KEPT, include_superseded=True)) == [
        "Likes jubjubbirds",
        "Likes jubjubbirds and bandersnatches",
    ]
    hits = await copy.search_turns(KEPT, "vorpalize", 5)
    assert hits and SECRETS[KEPT][0] in hits[0].content


def test_an_unencrypted_database_is_encrypted_in_place_by_migrate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bot.db"

    async def today() -> None:  # a database as today's schema writes it, before encryption
        store = SqliteStore(path)
        await store.open()
        memory = MemoryService(store, budget_tokens=1500, persona="p")
        for user_id in (GONE, KEPT):
            await remember(store, memory, user_id)
        await store.close()

    asyncio.run(today())
    assert SECRETS[GONE][0].encode() in files_of(tmp_path), "the old database holds plain text"
    monkeypatch.chdir(tmp_path)
    for name in ("BOT_CONFIG", "MEMORY_NEW_MASTER_KEY", "LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMORY_MASTER_KEY", KEY)
    config = tmp_path / "config.toml"
    config.write_text(f'[memory]\ndatabase_path = "{path}"\n')

    assert main(["--config", str(config), "migrate"]) == 0
    assert "encrypted with their own key" in capsys.readouterr().out
    data = files_of(tmp_path)
    for user_id in (GONE, KEPT):
        for term in plain_terms(SECRETS[user_id]):
            assert term.encode() not in data, f"{term!r} is still in the clear after migrate"

    assert main(["--config", str(config), "export-user", str(GONE)]) == 0
    export = json.loads(capsys.readouterr().out)
    assert export["calls"][0]["turns"][0]["content"] == "I keep zorblaxing near the quindlewoods"
    assert export["calls"][0]["summary"] == "Talked about zorblaxing and frabjousness"
    assert export["chats"][0]["turns"][0]["content"] == "Any news about snickersnacks?"
    assert main(["--config", str(config), "context", str(GONE), "--query", "what about the quindlewood?"]) == 0
    assert "zorblaxing near the quindlewoods" in capsys.readouterr().out
    assert main(["--config", str(config), "migrate"]) == 0  # a second run leaves sealed values alone
    capsys.readouterr()
    assert main(["--config", str(config), "export-user", str(KEPT)]) == 0
    assert json.loads(capsys.readouterr().out)["facts"][0]["text"] == "Likes jubjubbirds"


def test_an_encrypted_database_without_its_key_store_does_not_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("BOT_CONFIG", "MEMORY_MASTER_KEY", "MEMORY_NEW_MASTER_KEY", "LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "config.toml"
    config.write_text(f'[memory]\ndatabase_path = "{tmp_path / "bot.db"}"\n')
    monkeypatch.setenv("MEMORY_MASTER_KEY", KEY)
    assert main(["--config", str(config), "migrate"]) == 0
    (tmp_path / "bot.keys.db").unlink()
    monkeypatch.delenv("MEMORY_MASTER_KEY")
    capsys.readouterr()
    assert main(["--config", str(config), "export-user", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the memory database is encrypted" in err[0] and "MEMORY_MASTER_KEY" in err[0]
