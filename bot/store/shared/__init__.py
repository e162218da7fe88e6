"""The queries SQLite and PostgreSQL run alike, written once.

Each is written in PostgreSQL's placeholders (``$1``, ``$2``, ...; a number may stand more than once), which is the
one difference between the two dialects in these queries: SQLite reads them as ``?1``, ``?2``, ... (``sqlite_sql``).
The other is data too (``SqlBase.greatest``: SQLite's ``MAX`` of two values is PostgreSQL's ``GREATEST``). A backend's
foundation (``bot.store.sqlite.base.SqliteBase``, ``bot.store.postgres.base.PostgresBase``) runs them through the
primitives of ``SqlBase`` (``base``) and a transaction (``Tx``); each aggregate's mixin of a backend builds on the
module here of the same aggregate (``accounts``, ``conversations``, ``facts``, ``guild_settings``, ``jobs``,
``privacy``, ``vectors``) and writes only what differs (a statement of its own dialect, or a round trip it saves
there). Rows are read by column name, which both drivers' rows allow, and booleans as ``bool`` (SQLite stores 0
and 1).
"""

from bot.store.shared.accounts import SharedAccounts
from bot.store.shared.base import (
    OPEN_STATES,
    SqlBase,
    Tx,
    call_record,
    chat_record,
    db_value,
    sqlite_sql,
    user_record,
)
from bot.store.shared.conversations import (
    CALL_MEMORY_STATE,
    LISTED_CONVERSATIONS,
    SharedConversations,
    summary_of,
)
from bot.store.shared.facts import SharedFacts
from bot.store.shared.greetings import SharedGreetings, greeting_record
from bot.store.shared.guild_settings import SharedGuildSettings
from bot.store.shared.jobs import SharedJobs
from bot.store.shared.privacy import SharedPrivacy, only_from
from bot.store.shared.vectors import SharedVectors

__all__ = [
    "CALL_MEMORY_STATE",
    "LISTED_CONVERSATIONS",
    "OPEN_STATES",
    "SharedAccounts",
    "SharedConversations",
    "SharedFacts",
    "SharedGreetings",
    "SharedGuildSettings",
    "SharedJobs",
    "SharedPrivacy",
    "SharedVectors",
    "SqlBase",
    "Tx",
    "call_record",
    "chat_record",
    "db_value",
    "greeting_record",
    "only_from",
    "sqlite_sql",
    "summary_of",
    "user_record",
]
