"""SQLite operations that run whole on aiosqlite's database thread: one trip per operation.

Every ``await`` on an aiosqlite cursor is a trip to the database thread and back (a queue put, a thread switch,
a wake-up of the event loop). The functions here take the plain ``sqlite3.Connection`` and are handed to the
thread in one piece (``bot.store.sqlite.one_trip``, by ``SqliteBase._atomic`` inside a transaction and
``SqliteBase._alone`` outside one), so an operation costs one trip however many statements it runs.

They run on the database thread: they must not touch the event loop, and they see the connection's row factory
(``sqlite3.Row``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, TypeVar

from bot.store.columns import CALL_COLUMNS, FACT_COLUMNS, TURN_COLUMNS, TURN_NAMES, turn_record
from bot.store.live_plan import LivePlan, LivePlanNeeds, LiveWrite
from bot.store.models import (
    Conversation,
    NewTurn,
    TurnRecord,
    TurnsWrite,
    TurnUpdate,
)
from bot.store.repository import OpenCallExists, TurnsChanged
from bot.store.specifics import stored_specifics
from bot.store.terms import stored_language_terms

T = TypeVar("T")

_INSERT_CALL = f"INSERT INTO calls ({', '.join(CALL_COLUMNS)}) VALUES ({', '.join('?' * len(CALL_COLUMNS))})"


def in_transaction(conn: sqlite3.Connection, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``work(conn, *args, **kwargs)`` inside BEGIN IMMEDIATE ... COMMIT, rolled back if it raises (or if the
    COMMIT fails, e.g. on a full disk, so the connection is never left inside a transaction)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = work(conn, *args, **kwargs)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # SQLite may already have rolled back (e.g. on a full disk)
            conn.execute("ROLLBACK")
        raise
    return result


def apply_migration(
    conn: sqlite3.Connection,
    version: int,
    name: str,
    statements: list[str],
    repairs: list[tuple[str, list[str]]],
    applied_at: float,
) -> None:
    """One migration (see `SqliteBase._migrate`); run inside `in_transaction`: a repair's statements where its check
    finds something to repair, then the migration's, then its row in schema_migrations."""
    for needed, repair in repairs:
        if conn.execute(needed).fetchall():
            for statement in repair:
                conn.execute(statement)
    for statement in statements:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)", (version, name, applied_at)
    )


def changes(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> int:
    """Run one statement and return the rows it changed."""
    cur = conn.execute(sql, params)
    try:
        return max(cur.rowcount, 0)
    finally:
        cur.close()


def memory_write_allowed(
    conn: sqlite3.Connection,
    user_id: int,
    generation: int | None,
    convo: Conversation | None = None,
) -> bool:
    """The fence every write of a member's memory passes, inside the write's own transaction.

    False when the member forgot something or paused memory since the writer read `generation` (from
    `memory_generation`, before it started reading what it writes), when memory is paused, while a forget of
    everything is under way (`forget_begun`: the member's key may be deleted already), or when the call or chat is
    gone or private, or the call's transcript was purged by retention. `generation=None` skips only the
    generation check. One statement: each is a release and a re-take of the GIL on the database thread, which
    under load waits for the event loop's thread."""
    conversation = "1"
    params: list[Any] = [user_id, user_id, user_id]
    if convo is not None:
        purged = " AND transcript_purged_at IS NULL" if convo.kind == "call" else ""
        conversation = (
            f"EXISTS (SELECT 1 FROM {convo.table} WHERE {convo.column} = ? AND user_id = ? AND private = 0{purged})"
        )
        params += [convo.ref_id, user_id]
    fenced, held, present = _row(
        conn,
        "SELECT COALESCE((SELECT generation FROM memory_fences WHERE user_id = ?), 0), "
        "EXISTS (SELECT 1 FROM users WHERE user_id = ? AND memory_enabled = 0) "
        f"OR EXISTS (SELECT 1 FROM memory_fences WHERE user_id = ? AND forget_begun IS NOT NULL), {conversation}",
        params,
    )
    return (generation is None or int(fenced) == generation) and not held and bool(present)


def create_call(conn: sqlite3.Connection, values: Sequence[Any], user_id: int) -> None:
    """Insert a call row; OpenCallExists when the member already has an open call (the partial unique index)."""
    try:
        conn.execute(_INSERT_CALL, values).close()
    except sqlite3.IntegrityError as exc:
        if "calls.user_id" in str(exc):
            raise OpenCallExists(user_id) from exc
        raise


def apply_call_turns(
    conn: sqlite3.Connection,
    call_id: str,
    user_id: int,
    inserts: Sequence[NewTurn],
    updates: Sequence[TurnUpdate],
    *,
    anchored: bool,
    checkpoint_at: float,
    generation: int | None,
    expected_version: int | None,
    live_key: str | None = None,
) -> bool:
    """One merge of a call's turns (see `SqliteStore.apply_call_turns`); run inside `in_transaction`."""
    if not memory_write_allowed(conn, user_id, generation, Conversation("call", call_id)):
        return False
    _write_call_turns(conn, call_id, user_id, inserts, updates, anchored, checkpoint_at, expected_version, live_key)
    return True


def _write_call_turns(
    conn: sqlite3.Connection,
    call_id: str,
    user_id: int,
    inserts: Sequence[NewTurn],
    updates: Sequence[TurnUpdate],
    anchored: bool,
    checkpoint_at: float,
    expected_version: int | None,
    live_key: str | None,
) -> None:
    """The writes of `apply_call_turns`, once its fence has let them through."""
    bumped = changes(
        conn,
        "UPDATE calls SET history_anchored = MAX(history_anchored, ?), last_checkpoint_at = ?, "
        "turns_version = turns_version + 1 WHERE call_id = ? AND (? IS NULL OR turns_version = ?)",
        (int(anchored), checkpoint_at, call_id, expected_version, expected_version),
    )
    if bumped != 1 and expected_version is not None:
        raise TurnsChanged(call_id)
    if updates:
        conn.executemany(
            "UPDATE turns SET seq = ?, content = ?, segment = ?, partial = ?, captured = ?, specifics = ?, "
            "interrupted = ?, language = ?, language_terms = ? WHERE turn_id = ? AND call_id = ?",
            [
                (
                    u.seq,
                    u.content,
                    u.segment,
                    int(u.partial),
                    u.captured,
                    stored_specifics(u.specifics, u.content),
                    int(u.interrupted),
                    u.language,
                    stored_language_terms(u.language_terms, u.content, u.language),
                    u.turn_id,
                    call_id,
                )
                for u in updates
            ],
        ).close()
    if inserts:
        conn.executemany(
            "INSERT INTO turns (user_id, call_id, seq, segment, partial, captured, role, content, spoken_at, "
            "source, specifics, interrupted, language, language_terms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'voice', ?, ?, ?, ?)",
            [
                (
                    user_id,
                    call_id,
                    t.seq,
                    t.segment,
                    int(t.partial),
                    t.captured,
                    t.role,
                    t.content,
                    t.spoken_at,
                    stored_specifics(t.specifics, t.content),
                    int(t.interrupted),
                    t.language,
                    stored_language_terms(t.language_terms, t.content, t.language),
                )
                for t in inserts
            ],
        ).close()
    if live_key is not None:
        conn.execute("INSERT OR IGNORE INTO live_turns (call_id, turn_key) VALUES (?, ?)", (call_id, live_key)).close()


_LIVE_CALL_STATE = (
    "SELECT history_anchored, EXISTS (SELECT 1 FROM live_turns WHERE call_id = ? AND turn_key = ?) "
    "FROM calls WHERE call_id = ?"
)
_EXACT_RANGE = "abs(spoken_at) >= 1.0 AND abs(spoken_at) < 9007199254740992.0"
"""Where ``spoken_at`` travels in JSON as two integers (every timestamp does): 1 <= |x| < 2**53."""
_SPOKEN_AT_AS_JSON = (
    f"CASE WHEN {_EXACT_RANGE} THEN json_array(CAST(spoken_at AS INTEGER), "
    "CAST((spoken_at - CAST(spoken_at AS INTEGER)) * 4503599627370496 AS INTEGER)) END"
)
"""``spoken_at`` as [whole part, fraction * 2**52], both integers, which JSON carries exactly: each step is exact in
that range (the fraction of such a double is a multiple of 2**-52), and so is ``whole + fraction / 2**52``. A REAL
in SQLite's JSON has 15 digits, and its ``printf('%!.17g')`` is not correctly rounded everywhere (SQLite 3.40 gets
the 17th digit wrong for some values above 1e120, and more where ``long double`` is ``double``). Outside the range
(zero, tiny or huge values: never a clock's) the slot is null and those rows' values are read natively."""
_TURN_AS_JSON = "json_array({})".format(
    ", ".join(_SPOKEN_AT_AS_JSON if name == "spoken_at" else name for name in TURN_NAMES)
)
_SPOKEN_AT = TURN_NAMES.index("spoken_at")
_SEQ = TURN_NAMES.index("seq")
_TURN_ID = TURN_NAMES.index("turn_id")
_FRACTION_SCALE = float(2**52)


def call_lines(conn: sqlite3.Connection, call_id: str, last: int | None = None) -> list[TurnRecord]:
    """The call's lines in order (only the ``last`` ones when given), read in ONE step of one statement.

    Every step of a statement (one per row fetched) releases the GIL and takes it back; on the database thread
    each take waits while the event loop's thread runs Python (up to the interpreter's switch interval, 5 ms), so
    a voice turn's write that read the 66 rows of a call's tail row by row waited that many times under load.
    The rows come back as one JSON array, ordered here by ``seq`` (SQLite does not promise an aggregate's
    order); a ``spoken_at`` outside ``_EXACT_RANGE`` costs one more read."""
    limit = -1 if last is None else last
    (lines,) = _row(
        conn,
        f"SELECT json_group_array({_TURN_AS_JSON}) FROM "
        "(SELECT * FROM turns WHERE call_id = ? ORDER BY seq DESC LIMIT ?)",
        (call_id, limit),
    )
    rows: list[list[Any]] = json.loads(lines)
    rows.sort(key=itemgetter(_SEQ))
    odd: list[list[Any]] = []
    for row in rows:
        parts = row[_SPOKEN_AT]
        if parts is None:
            odd.append(row)
        else:
            row[_SPOKEN_AT] = parts[0] + parts[1] / _FRACTION_SCALE
    if odd:
        cur = conn.execute(
            f"SELECT turn_id, spoken_at FROM turns WHERE call_id = ? AND NOT ({_EXACT_RANGE})", (call_id,)
        )
        try:
            native = dict(cur.fetchall())
        finally:
            cur.close()
        for row in odd:
            row[_SPOKEN_AT] = native[row[_TURN_ID]]
    return [turn_record(row) for row in rows]


def write_live_turn(
    conn: sqlite3.Connection,
    call_id: str,
    user_id: int,
    turn_key: str | None,
    tail: int,
    plan: LivePlan,
    checkpoint_at: float,
    generation: int,
) -> LiveWrite:
    """See `SqliteStore.write_live_turn`; run inside `in_transaction` (BEGIN IMMEDIATE: nothing else writes the
    call between reading its lines and writing the new one)."""
    if not memory_write_allowed(conn, user_id, generation, Conversation("call", call_id)):
        return LiveWrite.REFUSED
    anchoring, seen = _row(conn, _LIVE_CALL_STATE, (call_id, turn_key, call_id))
    if seen:
        return LiveWrite.SEEN
    anchored = bool(anchoring)
    lines = call_lines(conn, call_id, tail)
    whole = len(lines) < tail
    write = plan(lines, whole, anchored)
    if write is LivePlanNeeds.WHOLE_CALL and not whole:
        write = plan(call_lines(conn, call_id), True, anchored)
    if not isinstance(write, TurnsWrite):
        if write is LivePlanNeeds.WHOLE_CALL:
            raise AssertionError("a live plan asked for the whole call when it had it")
        if turn_key is not None:
            changes(conn, "INSERT OR IGNORE INTO live_turns (call_id, turn_key) VALUES (?, ?)", (call_id, turn_key))
        return LiveWrite.UNCHANGED
    # Fenced above, in this transaction, which nothing else writes the call in: no version to expect.
    _write_call_turns(
        conn, call_id, user_id, write.inserts, write.updates, write.anchored, checkpoint_at, None, turn_key
    )
    return LiveWrite.WRITTEN


_OPEN = "('starting', 'active', 'ending')"


def _row(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> Any:
    cur = conn.execute(sql, params)
    try:
        return cur.fetchone()
    finally:
        cur.close()


def call_start_check(
    conn: sqlite3.Connection, user_id: int, guild_id: int | None, since: float
) -> tuple[Any, Any, Any]:
    """The rows `SqliteConversations.call_start_check` maps: (guild settings or None, user or None, counts)."""
    guild = None if guild_id is None else _row(conn, "SELECT * FROM guild_settings WHERE guild_id = ?", (guild_id,))
    user = _row(conn, "SELECT * FROM users WHERE user_id = ?", (user_id,))
    counts = _row(
        conn,
        f"SELECT (SELECT call_id FROM calls WHERE user_id = ? AND state IN {_OPEN} ORDER BY started_at DESC LIMIT 1), "
        "(SELECT COUNT(*) FROM calls WHERE user_id = ? AND guild_id IS ? AND started_at >= ? AND state != 'failed'), "
        f"(SELECT COUNT(*) FROM calls WHERE state IN {_OPEN})",
        (user_id, user_id, guild_id, since),
    )
    return guild, user, counts


def begin_call_ending(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> tuple[Any, int] | None:
    """Run the conditional transition ``sql`` (an UPDATE ... RETURNING *), then read the member's memory
    generation; None when the transition did not apply."""
    row = _row(conn, sql, params)
    if row is None:
        return None
    fence = _row(conn, "SELECT generation FROM memory_fences WHERE user_id = ?", (row["user_id"],))
    return row, int(fence[0]) if fence is not None else 0


def end_call(
    conn: sqlite3.Connection,
    call_id: str,
    ended_at: float,
    agent_stop_pending: bool,
    post_call_job: str | None,
    not_before: float,
) -> tuple[bool, int]:
    """See `SqliteConversations.end_call`; run inside `in_transaction`."""
    won = (
        changes(
            conn,
            "UPDATE calls SET state = 'ended', ended_at = ?, agent_stop_pending = ? "
            "WHERE call_id = ? AND state = 'ending'",
            (ended_at, int(agent_stop_pending), call_id),
        )
        == 1
    )
    if not won:
        return False, 0
    turns = int(_row(conn, "SELECT COUNT(*) FROM turns WHERE call_id = ?", (call_id,))[0])
    if post_call_job is not None and turns:
        changes(
            conn,
            "INSERT INTO jobs (kind, ref_id, created_at, updated_at, not_before) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (kind, ref_id) DO NOTHING",
            (post_call_job, call_id, ended_at, ended_at, not_before),
        )
    return True, turns


_CURRENT_FACTS = (
    f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = ? AND superseded_by IS NULL AND invalidated_at IS NULL "
    "ORDER BY confirmed_at DESC, mentions DESC, fact_id DESC LIMIT ?"
)
_LATEST_LINES = (
    f"SELECT {TURN_COLUMNS} FROM turns WHERE user_id = ? AND content <> '' "
    "ORDER BY spoken_at DESC, seq DESC, turn_id DESC LIMIT ?"
)


def call_start_memory(
    conn: sqlite3.Connection, user_id: int, facts: int, lines: int
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The rows `SqliteConversations.call_start_memory` maps, as plain tuples (no ``sqlite3.Row`` per row): the
    first ``facts`` current facts and the latest ``lines`` lines, newest first. Both are walks of an index in its
    order (``facts_current``, ``turns_user``: migration 11)."""
    cur = conn.cursor()
    cur.row_factory = None
    try:
        fact_rows = cur.execute(_CURRENT_FACTS, (user_id, facts)).fetchall()
        line_rows = cur.execute(_LATEST_LINES, (user_id, lines)).fetchall()
    finally:
        cur.close()
    return fact_rows, line_rows
