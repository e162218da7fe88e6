"""The embedded SQLite backend (aiosqlite): one file, WAL mode, foreign keys and secure_delete on.

One connection serves the process; an asyncio lock makes every operation (and every transaction) run alone,
so coroutines never see each other's half-written state. Conditional UPDATEs make call state transitions safe
across processes sharing the file too.

One module per aggregate, each a mixin over the shared connection of `base.SqliteBase` that implements one
protocol of `bot.store.repository`: `accounts` (AccountStore), `guild_settings` (GuildSettingsStore),
`conversations` (ConversationStore), `facts` (FactStore), `privacy` (PrivacyStore), `jobs` (JobStore),
`vectors` (VectorStore, dense retrieval); `base` holds the lifecycle (StoreLifecycle), `fences` the memory fence
every member write passes, `fulltext` the BM25 ranking shared by turns and facts. `SqliteStore` composes them.
"""

from __future__ import annotations

from bot.store.shared import SharedGreetings
from bot.store.sqlite.accounts import SqliteAccounts
from bot.store.sqlite.base import SqliteBase, _split_sql
from bot.store.sqlite.conversations import SqliteConversations
from bot.store.sqlite.facts import SqliteFacts
from bot.store.sqlite.fences import memory_write_allowed
from bot.store.sqlite.guild_settings import SqliteGuildSettings
from bot.store.sqlite.jobs import SqliteJobs
from bot.store.sqlite.privacy import SCRUB_BUSY_TIMEOUT_MS, SqlitePrivacy
from bot.store.sqlite.vectors import SqliteVectors

__all__ = ["SCRUB_BUSY_TIMEOUT_MS", "SqliteStore", "_split_sql", "memory_write_allowed"]


class SqliteStore(
    SqliteAccounts,
    SqliteGuildSettings,
    SqliteConversations,
    SqliteFacts,
    SqlitePrivacy,
    SqliteJobs,
    SqliteVectors,
    SharedGreetings,
    SqliteBase,
):
    """Every aggregate over one connection: implements `bot.store.repository.Store`."""
