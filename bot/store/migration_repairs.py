"""SQLite migration steps that run only where a query finds them needed (SQLite cannot add a column "if missing"),
apart from the append-only list of migrations they belong to (``bot.store.migrations``)."""

from __future__ import annotations

# Steps of a migration that run only where a query finds them needed (SQLite cannot add a column "if missing"):
# {version: [(query that returns a row when needed, statements)]}. Run in the migration's transaction, before it.
REPAIRS: dict[int, list[tuple[str, str]]] = {
    3: [
        (
            "SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM pragma_table_xinfo('turns') WHERE name = 'owner_key')",
            """
            ALTER TABLE turns ADD COLUMN owner_key TEXT GENERATED ALWAYS AS ('u' || user_id) VIRTUAL;
            DROP TRIGGER IF EXISTS turns_fts_insert;
            DROP TRIGGER IF EXISTS turns_fts_delete;
            DROP TRIGGER IF EXISTS turns_fts_update;
            DROP TABLE IF EXISTS turns_fts;
            CREATE VIRTUAL TABLE turns_fts USING fts5 (content, owner_key, content='turns', content_rowid='turn_id');
            CREATE TRIGGER turns_fts_insert AFTER INSERT ON turns BEGIN
                INSERT INTO turns_fts (rowid, content, owner_key) VALUES (new.turn_id, new.content, new.owner_key);
            END;
            CREATE TRIGGER turns_fts_delete AFTER DELETE ON turns BEGIN
                INSERT INTO turns_fts (turns_fts, rowid, content, owner_key)
                VALUES ('delete', old.turn_id, old.content, old.owner_key);
            END;
            CREATE TRIGGER turns_fts_update AFTER UPDATE OF content ON turns BEGIN
                INSERT INTO turns_fts (turns_fts, rowid, content, owner_key)
                VALUES ('delete', old.turn_id, old.content, old.owner_key);
                INSERT INTO turns_fts (rowid, content, owner_key) VALUES (new.turn_id, new.content, new.owner_key);
            END;
            INSERT INTO turns_fts (turns_fts) VALUES ('rebuild');
            """,
        )
    ]
}
