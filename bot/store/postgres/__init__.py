"""The PostgreSQL backend (asyncpg with a connection pool), selected by `memory.database_url = "postgresql://…"`.

It implements the same `Store` protocol as the SQLite backend and is tested by the same tests (see
tests/store). Several bot processes may share one database: call transitions are conditional UPDATEs and the job
queue is claimed with `FOR UPDATE SKIP LOCKED`, so two processes never take the same job.

One module per aggregate, each a mixin over the pool of `base.PostgresBase` that implements one protocol of
`bot.store.repository`: `accounts` (AccountStore), `guild_settings` (GuildSettingsStore), `conversations`
(ConversationStore), `facts` (FactStore), `privacy` (PrivacyStore), `jobs` (JobStore), `vectors` (VectorStore,
dense retrieval); `base` holds the lifecycle (StoreLifecycle), `fences` the memory fence every member write
passes, `fulltext` the BM25 first stage shared by turns and facts. `PostgresStore` composes them.
"""

from __future__ import annotations

from bot.store.postgres.accounts import PostgresAccounts
from bot.store.postgres.base import Connection, PostgresBase
from bot.store.postgres.conversations import PostgresConversations
from bot.store.postgres.facts import PostgresFacts
from bot.store.postgres.fences import memory_write_allowed
from bot.store.postgres.guild_settings import PostgresGuildSettings
from bot.store.postgres.jobs import PostgresJobs
from bot.store.postgres.privacy import PostgresPrivacy
from bot.store.postgres.vectors import PostgresVectors
from bot.store.shared import SharedGreetings

__all__ = ["Connection", "PostgresStore", "memory_write_allowed"]


class PostgresStore(
    PostgresAccounts,
    PostgresGuildSettings,
    PostgresConversations,
    PostgresFacts,
    PostgresPrivacy,
    PostgresJobs,
    PostgresVectors,
    SharedGreetings,
    PostgresBase,
):
    """Every aggregate over one connection pool: implements `bot.store.repository.Store`."""
