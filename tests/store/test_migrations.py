"""Migrations are append-only: once a migration ships, databases have applied it, so its text can never change
(a database created before an edit would never get the edit). Each migration's hash is pinned here; a change to a
shipped migration fails this test. A schema change is a new migration at the end of the list, with its hash added.
"""

from __future__ import annotations

import hashlib

import pytest

from bot.store.migrations import MIGRATIONS
from bot.store.pg_migrations import PG_MIGRATIONS

PINNED = {
    "sqlite": {
        1: "2660b398da8c67aab21ab612bc1bc902c509c3220fc8491a01080eb572bcc166",
        2: "66821567e62aea38a5e5c4612b363f0d80d2f085540450d4afc4a874332e5d93",
        3: "5d65592368ae7c39e569697a32d4e441570aa504d81c68358e2e9cbfb875f2a0",
    },
    "postgresql": {
        1: "cdc17a5ec4285ca67b3ef2f4f056dc19c2f491ca6670086ab3909b7c0e8f2bd7",
        2: "8b5ee98f6112fa0d0a7d5c4fc11f94060024acdf1612bca2cd403720b3ad57e9",
        3: "2f90171b0ab186d613c32b8e99717d37d335aac857350a8c5588b9bef917baab",
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
