"""Migrations are append-only: once a migration ships, databases have applied it, so its text can never change
(a database created before an edit would never get the edit). Each migration's hash is pinned here; a change to a
shipped migration fails this test. A schema change is a new migration at the end of the list, with its hash added.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from bot.store.migrations import LATEST_VERSION, MIGRATIONS
from bot.store.pg_migrations import PG_MIGRATIONS
from bot.store.sqlite import SqliteStore

PINNED = {
    "sqlite": {
        1: "2660b398da8c67aab21ab612bc1bc902c509c3220fc8491a01080eb572bcc166",
        2: "66821567e62aea38a5e5c4612b363f0d80d2f085540450d4afc4a874332e5d93",
        3: "657d267c7fc39953ee0cfdbb23772a7e5465acdf2a02c06c6eda586bad982ede",
        4: "4f8b4fb58e29d788f72049d730297c8205d7616f9ccd2a393ada8d084e2efec8",
        5: "5d65592368ae7c39e569697a32d4e441570aa504d81c68358e2e9cbfb875f2a0",
        6: "c21afd1cdf5935d86076aca1b4501b79f4545db0d252d97a03330a09482090dd",
        7: "ac1e2684ccdd5cef2ec2b5d2d1bf4da30fa7b78f63cbbb26c189786b202a4b12",
        8: "3a95e2bb3e606655e99bc7a2ab03ccc30aec568eeeecaa61bb645431a040b4c9",
        9: "cb974089b5fb17cb9cefb4fefbca5a49663e38f795203e2fe68a63d51373bb5a",
        10: "a13cb25cf30ba71befe76865f84e1af1129990897b13c214d37925298393118d",
        11: "819edf4d8b84d785a8032e58e585007f3ac5859f72d8d078513b7ba619586451",
        12: "210624ba18defef3f4666f03466878bfaa792b8807235fac17d7dc9dc357d0ec",
        13: "d65fcba153068ed61d585c9b22d953bc5c485cec6e531b261982ae0317560881",
        14: "cf8bdfd15951b12b74787069be5cc1ec28e0e674b92456881626f98652241d73",
        15: "8736aa64b28dccb387a2d0a43cd110ec2d8822850295424836d096b4b8bf2b9b",
        16: "fea69e6dcaa6a55749d6bae58284ee3aeff91af4ff3b352cc51fe02bdf83f5f3",
        17: "7f470a541270b8b39ffeff597a56d2f7f18f0ffaf9c56141a726169ddfc1c495",
        18: "1c2314d96256ff76e3af5a701df26dd4afafd14e2e43d19a824bc11f8d0f0f0c",
        19: "f8a50601806aa81c861dedff1c97eb2cb4632298d9c6fb7bd54fcaa900d06b11",
        20: "7e44288db0be0c9d2b455e5645cdfb10d8d9e9aa1438bb8bba0fd8a0a73bca70",
        21: "5a5a17db80f6d3153b7d8e1bf0cc993d74f0c25f422cb6d150368a65b9f7bae6",
    },
    "postgresql": {
        1: "cdc17a5ec4285ca67b3ef2f4f056dc19c2f491ca6670086ab3909b7c0e8f2bd7",
        2: "8b5ee98f6112fa0d0a7d5c4fc11f94060024acdf1612bca2cd403720b3ad57e9",
        3: "7fcf3b67fa846980e91844d153d54d01e86e6f1a4ff5c2394131bb42d55aa34e",
        4: "033179a8280bf5e28e7f2831bfd3ded1b299d97fe2dc61d540ddd1d79c8d121c",
        5: "2f90171b0ab186d613c32b8e99717d37d335aac857350a8c5588b9bef917baab",
        6: "f98c97a80bebf18a1d5f0edae604f14534fd84ae7dc3fe1cf88166acc852f81c",
        7: "a9eb8b6f629c0e67398df2647238d54a1586346bd17359c4acbc304c1803e63b",
        8: "91f8662da609af18d9a51f3d53bd5e9f57e449e2f581d64d025501d1c07e644f",
        9: "c02903c25ea87e20eff3c3dab7dff72d6eb237e942f905aa93fbcdc0a8cbf19e",
        10: "847f0054c8ec583522d3328b9392fef4249ae1c1e6c09a302e1bc28f5461a164",
        11: "819edf4d8b84d785a8032e58e585007f3ac5859f72d8d078513b7ba619586451",
        12: "f50987aa8aa8cac49e27b09372c21a9294b96538128e91175fd2698e1203b393",
        13: "c301afd7be26e3b82f7ff1fb28b28c4da5d7276cfcf982f657c48433d9953e27",
        14: "e6eae4e069cbd3fd78056f8acd2a1e0ff43c61b6858bae031369bcbd8ca94796",
        15: "8736aa64b28dccb387a2d0a43cd110ec2d8822850295424836d096b4b8bf2b9b",
        16: "fea69e6dcaa6a55749d6bae58284ee3aeff91af4ff3b352cc51fe02bdf83f5f3",
        17: "2bd424f4d6eb66daf0902594b070e767076c278bb01a85475a58ea2bacbd1c1c",
        18: "5f81d88c2f5a3432a589cfd83eecea3f0e92e3e9e0bc4c0b16fabe01320c3e7b",
        19: "da8ae98b7d99eee81e96d86d676ac1b2a48ef86771e6af3774cffc9098ce55b4",
        20: "58663be6bf3b792611af7e084b5e6ae0b22f0f509a5d7940a714a481e1448aef",
        21: "0da7d914fb4b47539f0cd63fb346a5160a128fe788e43fe03abf0263cf00c56d",
    },
}
LISTS = {"sqlite": MIGRATIONS, "postgresql": PG_MIGRATIONS}


@pytest.mark.parametrize("backend", sorted(LISTS))
def test_every_migration_is_pinned_and_none_changed(backend: str) -> None:
    migrations = LISTS[backend]
    assert [version for version, _name, _sql in migrations] == list(range(1, len(migrations) + 1)), "numbered 1..N"
    hashes = {version: hashlib.sha256(sql.encode()).hexdigest() for version, _name, sql in migrations}
    changed = [v for v, h in PINNED[backend].items() if hashes.get(v) != h]
    assert changed == [], f"{backend} migrations {changed} changed after they shipped: add a new migration instead"
    assert sorted(hashes) == sorted(PINNED[backend]), "pin the hash of each new migration here"


def test_both_backends_have_the_same_schema_versions() -> None:
    assert [(v, name) for v, name, _ in MIGRATIONS] == [(v, name) for v, name, _ in PG_MIGRATIONS]


def early_migration_1(edits: int) -> str:
    """Migration 1 as it shipped before its in-place edits: 0 = the first version; 1 = with the one-open-call index
    (the FTS without owner_key and the facts' foreign-key indexes came with the second and third versions)."""
    sql = MIGRATIONS[0][2]
    for line in (
        "        owner_key TEXT GENERATED ALWAYS AS ('u' || user_id) VIRTUAL,\n",
        "        CREATE INDEX facts_superseded_by ON facts (superseded_by) WHERE superseded_by IS NOT NULL;\n",
        "        CREATE INDEX facts_source_call ON facts (source_call_id) WHERE source_call_id IS NOT NULL;\n",
        "        CREATE INDEX facts_source_chat ON facts (source_chat_id) WHERE source_chat_id IS NOT NULL;\n",
    ):
        assert line.strip() in sql
        sql = "\n".join(row for row in sql.split("\n") if row.strip() != line.strip())
    old_fts = {
        "CREATE VIRTUAL TABLE turns_fts USING fts5 (content, owner_key, content='turns', content_rowid='turn_id');": (
            "CREATE VIRTUAL TABLE turns_fts USING fts5 (content, content='turns', content_rowid='turn_id');"
        ),
        "INSERT INTO turns_fts (rowid, content, owner_key) VALUES (new.turn_id, new.content, new.owner_key);": (
            "INSERT INTO turns_fts (rowid, content) VALUES (new.turn_id, new.content);"
        ),
        "INSERT INTO turns_fts (turns_fts, rowid, content, owner_key)\n            VALUES ('delete', old.turn_id, "
        "old.content, old.owner_key);": "INSERT INTO turns_fts (turns_fts, rowid, content) VALUES ('delete', "
        "old.turn_id, old.content);",
    }
    for new, old in old_fts.items():
        assert new in sql
        sql = sql.replace(new, old)
    if edits == 0:
        index = (
            "CREATE UNIQUE INDEX calls_one_open_per_user ON calls (user_id) "
            "WHERE state IN ('starting', 'active', 'ending');"
        )
        assert index in sql
        sql = sql.replace(index, "")
    return sql


def schema(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as db:
        objects = db.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
        columns = db.execute("SELECT name FROM pragma_table_xinfo('turns') ORDER BY cid").fetchall()
        return [*objects.fetchall(), *(("turns column", c) for (c,) in columns)]


@pytest.mark.parametrize("edits", [0, 1], ids=["first-version", "second-version"])
async def test_a_database_made_by_an_early_migration_1_reaches_todays_schema(tmp_path: Path, edits: int) -> None:
    fresh = tmp_path / "fresh.db"
    store = SqliteStore(fresh)
    await store.open()
    await store.close()

    old = tmp_path / "old.db"
    with sqlite3.connect(old) as db:
        db.executescript(early_migration_1(edits))
        db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL)")
        db.execute("INSERT INTO schema_migrations VALUES (1, 'initial schema', 0)")
        for user, call in ((1, "a"), (2, "b")):
            db.execute(
                "INSERT INTO calls (call_id, user_id, channel, agent_name, user_uid, agent_uid, state, max_minutes, "
                "started_at) VALUES (?, ?, ?, ?, 1, 2, 'ended', 30, 0)",
                (call, user, call, call),
            )
            db.execute(
                "INSERT INTO turns (user_id, call_id, seq, role, content, spoken_at, source) "
                "VALUES (?, ?, 0, 'user', 'my dog is called Biscuit', 0, 'voice')",
                (user, call),
            )
        if edits == 0:  # two open calls of one member: possible before the unique index existed
            for call in ("c", "d"):
                db.execute(
                    "INSERT INTO calls (call_id, user_id, channel, agent_name, user_uid, agent_uid, state, "
                    "max_minutes, started_at) VALUES (?, 3, ?, ?, 1, 2, 'active', 30, 0)",
                    (call, call, call),
                )
    store = SqliteStore(old)
    await store.open()
    try:
        assert await store.schema_version() == LATEST_VERSION
        hits = await store.search_turns(1, "biscuit", 10)
        assert [(t.user_id, t.call_id) for t in hits] == [(1, "a")], "the rebuilt index is scoped to the member"
        if edits == 0:
            assert [c.call_id for c in await store.open_calls()] == ["d"]
    finally:
        await store.close()
    assert schema(old) == schema(fresh)
