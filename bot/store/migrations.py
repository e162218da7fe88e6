"""Numbered schema migrations. Each runs once, in order, inside a transaction; the version is recorded."""

from __future__ import annotations

MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "initial schema",
        """
        CREATE TABLE users (
            user_id        INTEGER PRIMARY KEY,
            memory_enabled INTEGER NOT NULL DEFAULT 1,
            consent        TEXT CHECK (consent IN ('remember', 'no_memory')),
            consent_at     REAL,
            created_at     REAL NOT NULL
        );

        CREATE TABLE guild_settings (
            guild_id                 INTEGER PRIMARY KEY,
            calls_enabled            INTEGER NOT NULL DEFAULT 1,
            persona                  TEXT,
            greeting                 TEXT,
            max_call_minutes         INTEGER,
            calls_per_member_per_day INTEGER,
            retention_days           INTEGER,
            updated_at               REAL NOT NULL
        );

        CREATE TABLE calls (
            call_id           TEXT PRIMARY KEY,
            user_id           INTEGER NOT NULL,
            guild_id          INTEGER,
            channel           TEXT NOT NULL,
            agent_name        TEXT NOT NULL UNIQUE,
            agent_id          TEXT,
            user_uid          INTEGER NOT NULL,
            agent_uid         INTEGER NOT NULL,
            state             TEXT NOT NULL
                CHECK (state IN ('starting', 'active', 'ending', 'ended', 'failed')),
            private           INTEGER NOT NULL DEFAULT 0,
            link_hash         TEXT UNIQUE,
            link_expires_at   REAL,
            max_minutes       INTEGER NOT NULL,
            started_at        REAL NOT NULL,
            ended_at          REAL,
            end_reason        TEXT,
            history_anchored  INTEGER NOT NULL DEFAULT 0,
            last_checkpoint_at REAL,
            owner             TEXT,
            notify_token      TEXT,
            summary           TEXT
        );
        CREATE INDEX calls_user ON calls (user_id, started_at);
        CREATE INDEX calls_state ON calls (state) WHERE state NOT IN ('ended', 'failed');
        CREATE INDEX calls_guild ON calls (guild_id, started_at);
        CREATE UNIQUE INDEX calls_one_open_per_user ON calls (user_id) WHERE state IN ('starting', 'active', 'ending');

        CREATE TABLE chats (
            chat_id         TEXT PRIMARY KEY,
            user_id         INTEGER NOT NULL,
            guild_id        INTEGER,
            private         INTEGER NOT NULL DEFAULT 0,
            started_at      REAL NOT NULL,
            last_message_at REAL NOT NULL,
            ended_at        REAL,
            summary         TEXT
        );
        CREATE INDEX chats_user ON chats (user_id, started_at);
        CREATE INDEX chats_open ON chats (ended_at) WHERE ended_at IS NULL;

        CREATE TABLE turns (
            turn_id   INTEGER PRIMARY KEY,
            user_id   INTEGER NOT NULL,
            call_id   TEXT REFERENCES calls (call_id) ON DELETE CASCADE,
            chat_id   TEXT REFERENCES chats (chat_id) ON DELETE CASCADE,
            seq       INTEGER NOT NULL,
            segment   INTEGER NOT NULL DEFAULT 0,
            partial   INTEGER NOT NULL DEFAULT 0,
            captured  INTEGER NOT NULL DEFAULT 0,
            role      TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            content   TEXT NOT NULL,
            spoken_at REAL NOT NULL,
            source    TEXT NOT NULL CHECK (source IN ('voice', 'text')),
            owner_key TEXT GENERATED ALWAYS AS ('u' || user_id) VIRTUAL,
            CHECK ((call_id IS NULL) <> (chat_id IS NULL))
        );
        CREATE INDEX turns_call ON turns (call_id, seq) WHERE call_id IS NOT NULL;
        CREATE INDEX turns_chat ON turns (chat_id, seq) WHERE chat_id IS NOT NULL;
        CREATE INDEX turns_user ON turns (user_id, spoken_at);

        CREATE TABLE facts (
            fact_id        INTEGER PRIMARY KEY,
            user_id        INTEGER NOT NULL,
            text           TEXT NOT NULL,
            source_call_id TEXT REFERENCES calls (call_id) ON DELETE SET NULL,
            source_chat_id TEXT REFERENCES chats (chat_id) ON DELETE SET NULL,
            created_at     REAL NOT NULL,
            updated_at     REAL NOT NULL,
            confirmed_at   REAL NOT NULL,
            mentions       INTEGER NOT NULL DEFAULT 1,
            superseded_by  INTEGER REFERENCES facts (fact_id) ON DELETE SET NULL,
            invalidated_at REAL
        );
        CREATE INDEX facts_user ON facts (user_id, superseded_by, confirmed_at);
        -- Foreign-key actions look facts up by these columns when a fact, call or chat is deleted; without
        -- indexes every deletion would scan all facts.
        CREATE INDEX facts_superseded_by ON facts (superseded_by) WHERE superseded_by IS NOT NULL;
        CREATE INDEX facts_source_call ON facts (source_call_id) WHERE source_call_id IS NOT NULL;
        CREATE INDEX facts_source_chat ON facts (source_chat_id) WHERE source_chat_id IS NOT NULL;

        -- Which calls and chats a fact was learned or confirmed in, so forgetting a call removes the facts
        -- that came only from it.
        CREATE TABLE fact_sources (
            fact_id INTEGER NOT NULL REFERENCES facts (fact_id) ON DELETE CASCADE,
            call_id TEXT REFERENCES calls (call_id) ON DELETE CASCADE,
            chat_id TEXT REFERENCES chats (chat_id) ON DELETE CASCADE,
            CHECK ((call_id IS NULL) <> (chat_id IS NULL))
        );
        CREATE INDEX fact_sources_fact ON fact_sources (fact_id);
        CREATE INDEX fact_sources_call ON fact_sources (call_id) WHERE call_id IS NOT NULL;
        CREATE INDEX fact_sources_chat ON fact_sources (chat_id) WHERE chat_id IS NOT NULL;

        CREATE TABLE jobs (
            job_id     INTEGER PRIMARY KEY,
            kind       TEXT NOT NULL,
            ref_id     TEXT NOT NULL,
            state      TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'done', 'failed')),
            attempts   INTEGER NOT NULL DEFAULT 0,
            not_before REAL NOT NULL DEFAULT 0,
            last_error TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            UNIQUE (kind, ref_id)
        );
        CREATE INDEX jobs_pending ON jobs (state, not_before);

        CREATE TABLE notices (
            notice_id   TEXT PRIMARY KEY,
            received_at REAL NOT NULL
        );

        CREATE TABLE meta (
            key   TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );

        -- owner_key lets a search be scoped to one member inside the index (owner_key:u42 AND ...), so its cost
        -- follows that member's lines, not everyone's.
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

        CREATE VIRTUAL TABLE facts_fts USING fts5 (text, content='facts', content_rowid='fact_id');
        CREATE TRIGGER facts_fts_insert AFTER INSERT ON facts BEGIN
            INSERT INTO facts_fts (rowid, text) VALUES (new.fact_id, new.text);
        END;
        CREATE TRIGGER facts_fts_delete AFTER DELETE ON facts BEGIN
            INSERT INTO facts_fts (facts_fts, rowid, text) VALUES ('delete', old.fact_id, old.text);
        END;
        CREATE TRIGGER facts_fts_update AFTER UPDATE OF text ON facts BEGIN
            INSERT INTO facts_fts (facts_fts, rowid, text) VALUES ('delete', old.fact_id, old.text);
            INSERT INTO facts_fts (rowid, text) VALUES (new.fact_id, new.text);
        END;
        """,
    ),
    (
        2,
        "forget fences, durable scrubs, agents still to stop",
        """
        -- A member's memory generation: every forget and every pause bumps it in the same transaction, and
        -- every write of that member's memory checks, inside its own transaction, that the generation it read
        -- before it started is still current. Rows outlive the member's other rows on purpose.
        CREATE TABLE memory_fences (
            user_id    INTEGER PRIMARY KEY,
            generation INTEGER NOT NULL DEFAULT 0
        );

        -- Deleted text still to be scrubbed from indexes, free pages and the write-ahead log. Written in the
        -- deleting transaction, removed only once a scrub completed, so a crash or a busy reader cannot lose it.
        CREATE TABLE pending_scrubs (
            scrub_id   INTEGER PRIMARY KEY,
            created_at REAL NOT NULL
        );

        -- A call that ended while Agora would not stop its agent: the leave is retried until it succeeds.
        ALTER TABLE calls ADD COLUMN agent_stop_pending INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX calls_agent_stop_pending ON calls (agent_stop_pending) WHERE agent_stop_pending = 1;

        -- When retention purged the call's transcript: history arriving later (a replayed webhook) is ignored.
        ALTER TABLE calls ADD COLUMN transcript_purged_at REAL;

        -- The keyed hash of the browser that opened the call link first (a cookie): only it may use the link.
        ALTER TABLE calls ADD COLUMN browser_hash TEXT;
        """,
    ),
    (
        3,
        "full-text indexes with the porter stemmer (a search for 'renew' finds 'renewed', 'renewal')",
        """
        DROP TRIGGER turns_fts_insert;
        DROP TRIGGER turns_fts_delete;
        DROP TRIGGER turns_fts_update;
        DROP TABLE turns_fts;
        DROP TRIGGER facts_fts_insert;
        DROP TRIGGER facts_fts_delete;
        DROP TRIGGER facts_fts_update;
        DROP TABLE facts_fts;

        CREATE VIRTUAL TABLE turns_fts USING fts5 (
            content, owner_key, content='turns', content_rowid='turn_id',
            tokenize='porter unicode61 remove_diacritics 2'
        );
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

        -- Facts get the member scope inside the index too, so a fact search costs that member's facts only.
        ALTER TABLE facts ADD COLUMN owner_key TEXT GENERATED ALWAYS AS ('u' || user_id) VIRTUAL;
        CREATE VIRTUAL TABLE facts_fts USING fts5 (
            text, owner_key, content='facts', content_rowid='fact_id',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER facts_fts_insert AFTER INSERT ON facts BEGIN
            INSERT INTO facts_fts (rowid, text, owner_key) VALUES (new.fact_id, new.text, new.owner_key);
        END;
        CREATE TRIGGER facts_fts_delete AFTER DELETE ON facts BEGIN
            INSERT INTO facts_fts (facts_fts, rowid, text, owner_key)
            VALUES ('delete', old.fact_id, old.text, old.owner_key);
        END;
        CREATE TRIGGER facts_fts_update AFTER UPDATE OF text ON facts BEGIN
            INSERT INTO facts_fts (facts_fts, rowid, text, owner_key)
            VALUES ('delete', old.fact_id, old.text, old.owner_key);
            INSERT INTO facts_fts (rowid, text, owner_key) VALUES (new.fact_id, new.text, new.owner_key);
        END;
        INSERT INTO facts_fts (facts_fts) VALUES ('rebuild');
        """,
    ),
    (
        4,
        "live recall: per-call LLM key hash, per-turn write markers",
        """
        ALTER TABLE calls ADD COLUMN llm_key_hash TEXT;

        -- Which of the voice agent's turns (Agora's turn_id and the role) were already stored by the bot's LLM
        -- route, so a retried request never stores its line twice. Ids only, no text.
        CREATE TABLE live_turns (
            call_id  TEXT NOT NULL REFERENCES calls (call_id) ON DELETE CASCADE,
            turn_key TEXT NOT NULL,
            PRIMARY KEY (call_id, turn_key)
        ) WITHOUT ROWID;
        """,
    ),
    (
        5,
        "several processes: call leases, the Discord card any process can edit, versioned call transcripts",
        """
        ALTER TABLE calls ADD COLUMN lease_until REAL;
        ALTER TABLE calls ADD COLUMN card_message_id INTEGER;
        ALTER TABLE calls ADD COLUMN turns_version INTEGER NOT NULL DEFAULT 0;
        """,
    ),
    (
        6,
        "bring a database made by an early version of migration 1 to today's schema",
        """
        -- Migration 1 was edited in place twice after it shipped, so a database created before an edit never got
        -- it. Everything here is a no-op on a database made by today's migration 1; the turns' owner_key and its
        -- full-text index are added by REPAIRS (below) only where the column is missing.
        UPDATE calls SET state = 'failed', end_reason = 'duplicate_open_call'
            WHERE state IN ('starting', 'active', 'ending') AND rowid NOT IN (
                SELECT MAX(rowid) FROM calls WHERE state IN ('starting', 'active', 'ending') GROUP BY user_id);
        CREATE UNIQUE INDEX IF NOT EXISTS calls_one_open_per_user ON calls (user_id)
            WHERE state IN ('starting', 'active', 'ending');
        CREATE INDEX IF NOT EXISTS facts_superseded_by ON facts (superseded_by) WHERE superseded_by IS NOT NULL;
        CREATE INDEX IF NOT EXISTS facts_source_call ON facts (source_call_id) WHERE source_call_id IS NOT NULL;
        CREATE INDEX IF NOT EXISTS facts_source_chat ON facts (source_chat_id) WHERE source_chat_id IS NOT NULL;
        """,
    ),
    (
        7,
        "dense retrieval: one embedding per line and per fact, deleted with them",
        """
        -- One row per line (turn) or fact: the model that made it and the vector as packed float32 (encrypted
        -- with the member's key when member encryption is on). Deleting the line or fact deletes the row; a line
        -- whose text grows (a reply captured mid-sentence) loses its stale vector and is embedded again.
        -- AUTOINCREMENT: ids are never reused, so (count, sum of ids) changes whenever a member's vectors do.
        CREATE TABLE memory_vectors (
            vector_id INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id   INTEGER NOT NULL,
            turn_id   INTEGER REFERENCES turns (turn_id) ON DELETE CASCADE,
            fact_id   INTEGER REFERENCES facts (fact_id) ON DELETE CASCADE,
            model     TEXT NOT NULL,
            vector    BLOB NOT NULL,
            CHECK ((turn_id IS NULL) <> (fact_id IS NULL))
        );
        CREATE UNIQUE INDEX memory_vectors_turn ON memory_vectors (turn_id) WHERE turn_id IS NOT NULL;
        CREATE UNIQUE INDEX memory_vectors_fact ON memory_vectors (fact_id) WHERE fact_id IS NOT NULL;
        CREATE INDEX memory_vectors_user ON memory_vectors (user_id, model);
        CREATE TRIGGER memory_vectors_turn_changed AFTER UPDATE OF content ON turns
            WHEN old.content IS NOT new.content BEGIN
            DELETE FROM memory_vectors WHERE turn_id = new.turn_id;
        END;
        CREATE TRIGGER memory_vectors_fact_changed AFTER UPDATE OF text ON facts
            WHEN old.text IS NOT new.text BEGIN
            DELETE FROM memory_vectors WHERE fact_id = new.fact_id;
        END;
        """,
    ),
    (
        8,
        "memory versions: what an in-memory index of a member's lines checks before it is used",
        """
        -- A member's memory version: bumped by every change to what their memory holds (lines, facts, summaries,
        -- calls ending or turning private), except the lines of a call still open: those are the call in
        -- progress, which the per-turn build leaves out anyway, and the call's end bumps it. An in-memory index
        -- of the member's other lines (bot.memory.index) is kept while this, and the forget generation, stay the
        -- same. Triggers, so every writer (another process, migrate, copy-db) is seen.
        CREATE TABLE memory_versions (
            user_id INTEGER PRIMARY KEY,
            version INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE TRIGGER turns_version_insert AFTER INSERT ON turns
            WHEN NEW.call_id IS NULL
                OR COALESCE((SELECT state FROM calls WHERE call_id = NEW.call_id), 'ended')
                NOT IN ('starting', 'active', 'ending') BEGIN
            INSERT INTO memory_versions (user_id, version) VALUES (NEW.user_id, 1)
                ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
        END;
        CREATE TRIGGER turns_version_update AFTER UPDATE ON turns
            WHEN NEW.call_id IS NULL
                OR COALESCE((SELECT state FROM calls WHERE call_id = NEW.call_id), 'ended')
                NOT IN ('starting', 'active', 'ending') BEGIN
            INSERT INTO memory_versions (user_id, version) VALUES (NEW.user_id, 1)
                ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
        END;
        CREATE TRIGGER turns_version_delete AFTER DELETE ON turns BEGIN
            INSERT INTO memory_versions (user_id, version) VALUES (OLD.user_id, 1)
                ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
        END;
        CREATE TRIGGER facts_version_insert AFTER INSERT ON facts BEGIN
            INSERT INTO memory_versions (user_id, version) VALUES (NEW.user_id, 1)
                ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
        END;
        CREATE TRIGGER facts_version_update AFTER UPDATE ON facts BEGIN
            INSERT INTO memory_versions (user_id, version) VALUES (NEW.user_id, 1)
                ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
        END;
        CREATE TRIGGER facts_version_delete AFTER DELETE ON facts BEGIN
            INSERT INTO memory_versions (user_id, version) VALUES (OLD.user_id, 1)
                ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
        END;
        CREATE TRIGGER calls_version_update AFTER UPDATE OF state, private, summary, user_id ON calls BEGIN
            INSERT INTO memory_versions (user_id, version) VALUES (NEW.user_id, 1)
                ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
        END;
        CREATE TRIGGER calls_version_delete AFTER DELETE ON calls BEGIN
            INSERT INTO memory_versions (user_id, version) VALUES (OLD.user_id, 1)
                ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
        END;
        CREATE TRIGGER chats_version_update AFTER UPDATE OF summary, private, user_id ON chats BEGIN
            INSERT INTO memory_versions (user_id, version) VALUES (NEW.user_id, 1)
                ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
        END;
        CREATE TRIGGER chats_version_delete AFTER DELETE ON chats BEGIN
            INSERT INTO memory_versions (user_id, version) VALUES (OLD.user_id, 1)
                ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
        END;
        """,
    ),
    (
        9,
        "member encryption: a sealed text's full-text vector is its keyed term hashes, unstemmed",
        """
        -- PostgreSQL only (its tsvector configuration); SQLite's FTS5 indexes sealed texts' hashes as they are.
        SELECT 1;
        """,
    ),
    (
        10,
        "turn specifics: how much each line carries, kept so a call start ranks lines without reading their text",
        """
        -- bot.store.specifics, counted from the plain text when a line is written (the encrypting layer counts
        -- before it seals). Lines from before are counted when the store opens (sealed ones by the encrypting
        -- layer, which can open them); the partial index finds those.
        ALTER TABLE turns ADD COLUMN specifics INTEGER;
        CREATE INDEX turns_specifics_missing ON turns (turn_id) WHERE specifics IS NULL;
        """,
    ),
    (
        11,
        "call-start read order: the latest lines and the current facts in the order a call start reads them",
        """
        -- A call start reads a member's latest lines newest first (spoken_at, then seq) and the first page of
        -- their current facts (most recently confirmed, most mentioned, newest first): with the index in that
        -- order each is a walk of the rows it returns, not a sort of all the member's rows.
        DROP INDEX turns_user;
        CREATE INDEX turns_user ON turns (user_id, spoken_at, seq);
        CREATE INDEX facts_current ON facts (user_id, confirmed_at, mentions, fact_id)
            WHERE superseded_by IS NULL AND invalidated_at IS NULL;
        """,
    ),
    (
        12,
        "forgotten calls: a call open when its member forgot everything goes as soon as it has finished",
        """
        -- /forget everything deletes the member's finished calls; one still open keeps its row while the call
        -- runs (its agent must be stopped, its lease and link still work) and is marked. Whatever finishes it
        -- (ended, failed, or its agent stopped at last after an ended call), the row goes with that write, so no
        -- trace of the member's calls stays. A call started after the forget is not marked.
        ALTER TABLE calls ADD COLUMN forgotten INTEGER NOT NULL DEFAULT 0;
        CREATE TRIGGER calls_forgotten_finished AFTER UPDATE ON calls
            WHEN NEW.forgotten = 1 AND NEW.state IN ('ended', 'failed') AND NEW.agent_stop_pending = 0
        BEGIN
            DELETE FROM calls WHERE call_id = NEW.call_id;
        END;
        """,
    ),
    (
        13,
        "interrupted replies: a reply the member spoke over is kept as what they heard, and marked",
        """
        ALTER TABLE turns ADD COLUMN interrupted INTEGER NOT NULL DEFAULT 0;
        """,
    ),
    (
        14,
        "facts in the member's own words: told facts are marked, and what is learned never supersedes them",
        """
        ALTER TABLE facts ADD COLUMN told INTEGER NOT NULL DEFAULT 0;
        """,
    ),
    (
        15,
        "lines lost while no bot process ran: how many things the member said were never stored",
        """
        -- Set when a call's agent stopped while no bot process watched it and Agora's history webhook never came:
        -- Agora's turn analytics (which carry no text) counted more of the member's spoken turns than the call
        -- has lines of theirs. Only the count; 0 when nothing is known to be missing.
        ALTER TABLE calls ADD COLUMN lines_lost INTEGER NOT NULL DEFAULT 0;
        """,
    ),
    (
        16,
        "call languages: the member's chosen language, the server's default, and the language each call was held in",
        """
        -- The language a member chose for their calls (/call language:, /memory language:) and a server's default
        -- (/settings language): a code of bot.calls.language.LANGUAGES, NULL for none. A call records the
        -- language it was held in ('en' for every call from before).
        ALTER TABLE users ADD COLUMN language TEXT;
        ALTER TABLE guild_settings ADD COLUMN language TEXT;
        ALTER TABLE calls ADD COLUMN language TEXT NOT NULL DEFAULT 'en';
        """,
    ),
    (
        17,
        "lines keep their language: found by their words stemmed in it as well as in English",
        """
        -- A line's language is its call's (a code of bot.calls.language.LANGUAGES; 'en' for every line from
        -- before, and for chats). language_terms: its words stemmed in that language (bot.store.terms), NULL for
        -- English, a language Snowball does not stem, or a sealed text (its keyed hashes hold them). The word index
        -- finds a line by them besides its English terms, through turns_language_fts, scoped to the member like
        -- turns_fts. Whatever writes a line's text writes its language terms with it (a scrub sets them NULL).
        ALTER TABLE turns ADD COLUMN language TEXT NOT NULL DEFAULT 'en';
        ALTER TABLE turns ADD COLUMN language_terms TEXT;
        CREATE VIRTUAL TABLE turns_language_fts USING fts5 (
            language_terms, owner_key, content='turns', content_rowid='turn_id'
        );
        CREATE TRIGGER turns_language_fts_insert AFTER INSERT ON turns WHEN new.language_terms IS NOT NULL BEGIN
            INSERT INTO turns_language_fts (rowid, language_terms, owner_key)
            VALUES (new.turn_id, new.language_terms, new.owner_key);
        END;
        CREATE TRIGGER turns_language_fts_delete AFTER DELETE ON turns WHEN old.language_terms IS NOT NULL BEGIN
            INSERT INTO turns_language_fts (turns_language_fts, rowid, language_terms, owner_key)
            VALUES ('delete', old.turn_id, old.language_terms, old.owner_key);
        END;
        CREATE TRIGGER turns_language_fts_update AFTER UPDATE OF language_terms ON turns BEGIN
            INSERT INTO turns_language_fts (turns_language_fts, rowid, language_terms, owner_key)
            SELECT 'delete', old.turn_id, old.language_terms, old.owner_key WHERE old.language_terms IS NOT NULL;
            INSERT INTO turns_language_fts (rowid, language_terms, owner_key)
            SELECT new.turn_id, new.language_terms, new.owner_key WHERE new.language_terms IS NOT NULL;
        END;
        """,
    ),
    (
        18,
        "members' Discord language: what reaches them outside an interaction reads it after a restart",
        """
        -- The member's Discord locale as of their last interaction (e.g. 'es-ES'), for direct messages and call
        -- cards edited outside one, by any bot process and after a restart. Written only for members who chose to
        -- be remembered (bot.memory.locales); on their row, so /forget everything drops it. NULL: none known.
        ALTER TABLE users ADD COLUMN locale TEXT;
        """,
    ),
    (
        19,
        "a forget of everything under way is recorded, so a kill part-way is finished and fences writes meanwhile",
        """
        -- The generation a forget of everything set when it began (bot.memory.service.forget_everything: the
        -- generation moves and this is set, then the member's key is deleted, then the rows, which clears it).
        -- While it is set every write of the member's memory is refused, and whoever finds it set (the next
        -- start, the periodic sweep, `check`, the next forget-user) finishes the forget. NULL: none under way.
        ALTER TABLE memory_fences ADD COLUMN forget_begun INTEGER;
        CREATE INDEX memory_fences_forget_begun ON memory_fences (user_id) WHERE forget_begun IS NOT NULL;
        """,
    ),
    (
        20,
        "personal greetings: a member's next opening line, prepared after their conversations",
        """
        -- A member's prepared greeting (bot.memory.greeting): the name to greet them by and one question on their
        -- last conversation (both sealed with member encryption), the language of that question, and what it drew
        -- on: the conversation (call_id or chat_id) and the facts (fact_ids, ',12,15,'). Deleting or blanking a
        -- line of that conversation, deleting the conversation, or deleting or superseding one of those facts
        -- deletes the greeting in the same transaction (the triggers below), so no forget leaves it behind.
        -- users.personal_greetings and guild_settings.personal_greetings: a member's and a server's switch.
        ALTER TABLE users ADD COLUMN personal_greetings INTEGER NOT NULL DEFAULT 1;
        ALTER TABLE guild_settings ADD COLUMN personal_greetings INTEGER NOT NULL DEFAULT 1;
        CREATE TABLE greetings (
            user_id     INTEGER PRIMARY KEY,
            language    TEXT NOT NULL,
            name        TEXT,
            follow_up   TEXT,
            call_id     TEXT,
            chat_id     TEXT,
            fact_ids    TEXT NOT NULL DEFAULT ',',
            prepared_at REAL NOT NULL
        );
        CREATE TRIGGER greetings_fact_deleted AFTER DELETE ON facts BEGIN
            DELETE FROM greetings WHERE user_id = old.user_id AND instr(fact_ids, ',' || old.fact_id || ',') > 0;
        END;
        CREATE TRIGGER greetings_fact_superseded AFTER UPDATE OF superseded_by, invalidated_at ON facts BEGIN
            DELETE FROM greetings WHERE user_id = old.user_id AND instr(fact_ids, ',' || old.fact_id || ',') > 0;
        END;
        CREATE TRIGGER greetings_line_deleted AFTER DELETE ON turns BEGIN
            DELETE FROM greetings WHERE user_id = old.user_id AND (call_id = old.call_id OR chat_id = old.chat_id);
        END;
        CREATE TRIGGER greetings_line_blanked AFTER UPDATE OF content ON turns WHEN new.content = '' BEGIN
            DELETE FROM greetings WHERE user_id = old.user_id AND (call_id = old.call_id OR chat_id = old.chat_id);
        END;
        CREATE TRIGGER greetings_call_deleted AFTER DELETE ON calls BEGIN
            DELETE FROM greetings WHERE call_id = old.call_id;
        END;
        CREATE TRIGGER greetings_chat_deleted AFTER DELETE ON chats BEGIN
            DELETE FROM greetings WHERE chat_id = old.chat_id;
        END;
        CREATE TRIGGER greetings_member_deleted AFTER DELETE ON users BEGIN
            DELETE FROM greetings WHERE user_id = old.user_id;
        END;
        """,
    ),
    (
        21,
        "turn specifics recounted: a line holding an identifier (a code, an account number) counts one more",
        """
        -- bot.store.specifics now counts an identifier once more. Only a line with a digit can hold one: those,
        -- and every sealed line (its text is not readable here), lose their count and are counted again when the
        -- store opens (sealed ones by the encrypting layer), as the lines from before migration 10 were.
        UPDATE turns SET specifics = NULL WHERE content GLOB '*[0-9]*' OR content GLOB '*\u27d0*';
        """,
    ),
]

LATEST_VERSION = MIGRATIONS[-1][0]
