"""The services of one bot process, built from settings in one place and closed together."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr

from bot.agora import ConvoAIClient
from bot.calls.page import CallPageAdapter
from bot.calls.service import CallService
from bot.calls.settings import GuildSettingsService
from bot.config import Settings
from bot.doctor import StartupProblem
from bot.keys import MASTER_KEY_ENV, KeyStoreLocked
from bot.keys.encrypted import ENCRYPTION_META, EncryptedStore
from bot.keys.pg_store import key_store_state_pg
from bot.keys.setup import build_key_store, check_key_store, key_store_label
from bot.keys.store import KeyStore, key_store_state
from bot.llm import LLMClient, LLMError
from bot.llm.embeddings import EmbeddingClient
from bot.memory import embedded, tokens
from bot.memory.chat import ChatService
from bot.memory.choices import MemberChoices
from bot.memory.dense import EMBED_BATCH, DenseRetriever, Embedder, MemberEmbedder
from bot.memory.forget_requests import ForgetRequests
from bot.memory.live import LiveRecall
from bot.memory.locales import MemberLocales
from bot.memory.own_words import OwnWords
from bot.memory.postcall import PostCallProcessor
from bot.memory.service import MemoryService
from bot.monitor import Counters, Monitor
from bot.store.inuse import DatabaseUse, PostgresUse, SqliteUse
from bot.store.postgres import PostgresStore
from bot.store.repository import Store
from bot.store.sqlite import SqliteStore
from bot.web.backend import CallPageBackend, NoCalls, OperatorView
from bot.web.server import WebServer

log = logging.getLogger(__name__)

RETENTION_SWEEP_SECONDS = 3600.0
SHUTDOWN_SCRUB_WAIT_SECONDS = 5.0
CHAT_SWEEP_SECONDS = 60.0


@dataclass
class Services:
    settings: Settings
    store: Store
    memory: MemoryService
    keys: KeyStore | None = None
    agora: ConvoAIClient | None = None
    llm: LLMClient | None = None
    embeddings: Embedder | None = None
    embedder: MemberEmbedder | None = None
    """What embeds a member's lines and facts (the post-call queue's embed step, and ``import-history``'s)."""
    calls: CallService | None = None
    postcall: PostCallProcessor | None = None
    chat: ChatService | None = None
    web: WebServer | None = None
    counters: Counters = field(default_factory=Counters)
    monitor: Monitor | None = None
    live: LiveRecall | None = None
    processed_listeners: list[Callable[[str, str, int], Awaitable[None]]] = field(default_factory=list)
    clock: Callable[[], float] = time.time
    """The wall clock the member-facing rules stamp their changes with (tests pin it)."""
    choices: MemberChoices = field(init=False)
    locales: MemberLocales = field(init=False)
    forget_requests: ForgetRequests = field(init=False)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _workers: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.locales = MemberLocales(self.store)
        self.choices = MemberChoices(self.store, clock=self.clock, locales=self.locales)
        self.forget_requests = ForgetRequests(self.store, self.memory)

    @property
    def guild_settings(self) -> GuildSettingsService:
        """What /settings reads and changes; built on use, as the call service (today's usage) comes later."""
        return GuildSettingsService(self.store, self.settings, self.calls, clock=self.clock)

    async def notify_processed(self, kind: str, ref_id: str, facts_learned: int) -> None:
        """Post-call processing finished a call or chat: tell whoever shows it to the member."""
        for listener in self.processed_listeners:
            try:
                await listener(kind, ref_id, facts_learned)
            except Exception:
                log.exception("a processed-listener failed for %s %s", kind, ref_id)

    async def start_background(self) -> None:
        """Web server, call reconcile, the post-call queue and the periodic sweeps."""
        await asyncio.to_thread(tokens.encoding)  # load the tokenizer's vocabulary off the event loop, once
        if isinstance(self.embeddings, embedded.EmbeddedEmbedder):  # and the embedded model, before Discord connects
            try:
                await self.embeddings.load()
            except LLMError as exc:
                log.warning("%s; memory is searched by words (BM25) until it loads", exc.message)
        await self.memory.finish_interrupted_forgets()
        if not await self.memory.finish_pending_scrubs():
            log.warning("deleted memory could not be scrubbed from the database file yet; the sweep retries")
        if self.web is not None:
            try:
                await self.web.start()
            except OSError as exc:
                where = f"web.host:web.port (WEB_HOST, WEB_PORT) {self.settings.web.host}:{self.settings.web.port}"
                raise StartupProblem(f"the call page server cannot listen on {where}: {exc.strerror or exc}") from None
        if self.calls is not None:
            counts = await self.calls.reconcile()
            log.info("reconciled open calls: %s", counts)
            self._workers.append(asyncio.create_task(self.calls.run_takeover(self._stop), name="call-takeover"))
        if self.postcall is not None:
            self._workers.append(asyncio.create_task(self.postcall.run(self._stop), name="post-call"))
        self._workers.append(asyncio.create_task(self._sweeps(), name="sweeps"))

    async def _sweeps(self) -> None:
        last_retention = 0.0
        while not self._stop.is_set():
            try:
                await self.memory.finish_interrupted_forgets()
                await self.memory.finish_pending_scrubs()
                if self.calls is not None:
                    await self.calls.save_unsaved()
                    await self.calls.drain_inbox()
                if self.chat is not None:
                    await self.chat.close_idle_sessions()
                if time.time() - last_retention >= RETENTION_SWEEP_SECONDS:
                    last_retention = time.time()
                    await self.purge_expired_transcripts()
            except Exception:
                log.exception("a periodic sweep failed; it runs again shortly")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=CHAT_SWEEP_SECONDS)

    async def purge_expired_transcripts(self) -> int:
        removed = 0
        for guild_id, days in await self.store.retention_policies():
            removed += await self.memory.purge_expired(guild_id, days)
        return removed

    async def stop_background(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self.calls is not None:
            await self.calls.shutdown()
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self.web is not None:
            await self.web.stop()
        if self.live is not None:
            await self.live.wait_idle()


def build_store(settings: Settings, keys: KeyStore | None = None) -> Store:
    """PostgreSQL when `memory.database_url` is set, else the SQLite file at `memory.database_path`; with a key
    store, behind the layer that encrypts every member text (bot.keys.encrypted)."""
    backend: Store
    if settings.memory.database_url is not None:
        size = settings.memory.pool_size
        backend = PostgresStore(
            settings.memory.database_url.get_secret_value(), min_connections=min(2, size), max_connections=size
        )
    else:
        backend = SqliteStore(
            settings.memory.database_path, busy_timeout_ms=int(settings.memory.lock_timeout_seconds * 1000)
        )
    return backend if keys is None else EncryptedStore(backend, keys)


def database_use(settings: Settings) -> DatabaseUse:
    """The lock that shows which bot processes use the configured database (``bot.store.inuse``)."""
    if settings.memory.database_url is not None:
        from bot.store.copy import describe

        return PostgresUse(
            settings.memory.database_url.get_secret_value(),
            f"memory.database_url {describe(settings.memory.database_url.get_secret_value())}",
        )
    return SqliteUse(settings.memory.database_path)


async def open_key_store(settings: Settings) -> KeyStore | None:
    """The member key store when a master key is set; None when none is set and no member keys exist yet.
    Raises ``KeyStoreLocked`` (writing nothing) when member keys exist and the master key is missing or wrong."""
    master_key = settings.memory.master_key_bytes()
    await check_key_store(settings.memory)
    if master_key is None:
        return None
    keys = build_key_store(settings.memory, master_key)
    await keys.open()
    return keys


def _secret(value: SecretStr | None) -> str:
    return value.get_secret_value() if value is not None else ""


def build_agora_client(settings: Settings, **overrides: Any) -> ConvoAIClient:
    """The ConvoAI client from settings; `check` and the tests pass overrides (retries, back-off, transport)."""
    options: dict[str, Any] = {
        "base_url": settings.agora.api_base_url,
        "app_id": settings.agora.app_id or "",
        "customer_id": _secret(settings.agora.customer_id),
        "customer_secret": _secret(settings.agora.customer_secret),
        "timeout": settings.agora.request_timeout_seconds,
    }
    return ConvoAIClient(**{**options, **overrides})


def build_llm_client(settings: Settings, **overrides: Any) -> LLMClient:
    options: dict[str, Any] = {
        "base_url": settings.llm.base_url or "",
        "model": settings.llm.model,
        "api_key": _secret(settings.llm.api_key) or None,
        "timeout": settings.llm.timeout_seconds,
    }
    return LLMClient(**{**options, **overrides})


def build_embedding_client(settings: Settings) -> EmbeddingClient:
    return EmbeddingClient(
        base_url=settings.llm.base_url or "",
        model=settings.llm.embedding_model or "",
        api_key=_secret(settings.llm.api_key) or None,
        timeout=settings.llm.timeout_seconds,
    )


def build_embedder(settings: Settings) -> Embedder | None:
    """What embeds lines, facts and utterances (``Settings.embeddings_source``): the server's
    ``llm.embedding_model``, else the embedded model (when its package is installed), else nothing."""
    source = settings.embeddings_source
    if source == "server":
        return build_embedding_client(settings)
    if source == "embedded":
        if embedded.available():
            return embedded.EmbeddedEmbedder()
        log.warning(
            "memory.semantic_search is on but the %s package is not installed: memory is searched by words (BM25) only",
            embedded.PACKAGE,
        )
    return None


def build_dense_retrieval(settings: Settings, store: Store, memory: MemoryService) -> MemberEmbedder | None:
    """Unless turned off: query-aware builds fuse dense and BM25 rankings, and the returned embedder is the
    post-call queue's embedding step (its client is ``embedder.client``, closed by the caller)."""
    client = build_embedder(settings)
    if client is None:
        return None
    retriever = DenseRetriever(store, client)
    memory.context.dense = retriever
    batch = embedded.BATCH if isinstance(client, embedded.EmbeddedEmbedder) else EMBED_BATCH
    return MemberEmbedder(store, client, batch=batch, on_stored=retriever.vectors_changed)


def build_calls(
    settings: Settings, store: Store, memory: MemoryService, agora: ConvoAIClient, counters: Counters, **overrides: Any
) -> tuple[CallService, CallPageAdapter]:
    """The call service and its web backend; the tests pass a clock, shorter timings and turn the checkpoint loop
    off."""
    calls = CallService(store, memory, agora, settings, counters=counters, **overrides)
    page = CallPageAdapter(
        calls,
        store,
        app_id=settings.agora.app_id or "",
        page_close_grace_seconds=settings.calls.page_close_grace_seconds,
        rejoin_seconds=settings.agora.idle_timeout_seconds,
    )
    return calls, page


def build_live_recall(
    settings: Settings, memory: MemoryService, llm: LLMClient | None, calls: CallService
) -> LiveRecall | None:
    """The voice agent's LLM route (live recall), when it is on and there is an upstream LLM."""
    if not settings.live_recall_enabled or llm is None:
        return None
    return LiveRecall(
        memory,
        llm,
        authorize=calls.call_for_llm_key,
        max_history=settings.agora.max_history,
        timeout_seconds=settings.llm.timeout_seconds,
        own_words=OwnWords(memory) if settings.memory.voice_tools else None,
    )


def build_monitor(
    store: Store, counters: Counters, agora: ConvoAIClient | None, backend: CallPageAdapter | None, **overrides: Any
) -> Monitor:
    monitor = Monitor(store, counters=counters, agora=agora, **overrides)
    if backend is not None:
        monitor.sections.append(backend.health_figures)
    return monitor


def build_web_server(
    settings: Settings, backend: CallPageBackend, monitor: OperatorView | None, **overrides: Any
) -> WebServer:
    options: dict[str, Any] = {
        "host": settings.web.host,
        "port": settings.web.port,
        "sdk_url": settings.agora.sdk_url,
        "public_url": settings.web.public_url,
        "monitor": monitor,
        "emulator_controls_url": settings.agora.emulator_controls_url,
    }
    return WebServer(backend, **{**options, **overrides})


SEALING = "encrypt the memory database in place"


async def _first_encryption(settings: Settings) -> bool:
    """A master key is set and the key store was never opened with one: opening it creates it, and the memory
    database is encrypted in place next."""
    if settings.memory.master_key is None:
        return False
    if settings.memory.key_store_url is not None:
        verifier, count = await key_store_state_pg(settings.memory.key_store_url.get_secret_value())
    else:
        verifier, count = await key_store_state(settings.memory.key_store_path)
    return verifier is None and count == 0


async def _open_store(settings: Settings, use: DatabaseUse | None) -> tuple[KeyStore | None, Store]:
    keys = await open_key_store(settings)
    store = build_store(settings, keys)
    if isinstance(store, EncryptedStore) and use is not None:
        store.sealing_guard = use.alone
    try:
        await store.open()
        if keys is None and await store.get_meta(ENCRYPTION_META) is not None:
            raise KeyStoreLocked(
                f"the memory database is encrypted, but {MASTER_KEY_ENV} is not set and the key store "
                f"{key_store_label(settings.memory)} holds no member keys: set {MASTER_KEY_ENV} and memory.key_store "
                "(or memory.key_store_url) to the master key and key store this memory was encrypted with. Nothing "
                "was changed."
            )
    except BaseException:
        await store.close()
        if keys is not None:
            await keys.close()
        raise
    return keys, store


@asynccontextmanager
async def open_services(
    settings: Settings, *, full: bool = False, in_use: DatabaseUse | None = None
) -> AsyncIterator[Services]:
    """The store and memory always; with `full`, everything the running bot needs (clients, calls, web).
    ``in_use``: the running bot's held lock on the database, through which it may encrypt it in place.

    The key store is checked first: a missing or wrong master key for existing member keys raises
    ``KeyStoreLocked`` before anything (the memory database included) is opened for writing."""
    use = in_use if in_use is not None else database_use(settings)
    first = await _first_encryption(settings)  # creating the key store: only where no other bot writes plain text
    async with use.alone(SEALING) if first else contextlib.nullcontext():
        keys, store = await _open_store(settings, None if first else use)
    memory = MemoryService(
        store,
        budget_tokens=settings.memory.context_budget_tokens,
        persona=settings.memory.persona,
        keys=keys,
        read_ahead=settings.live_recall_enabled,
    )
    services = Services(settings=settings, store=store, memory=memory, keys=keys)
    try:
        # every query-aware build searches by meaning as the running bot's does: `context` prints what it builds
        services.embedder = build_dense_retrieval(settings, store, memory)
        services.embeddings = services.embedder.client if services.embedder is not None else None
        if full:
            if settings.llm.enabled:
                services.llm = build_llm_client(settings)
            services.postcall = PostCallProcessor(
                store, services.llm, on_processed=services.notify_processed, embedder=services.embedder
            )
            services.chat = ChatService(
                store,
                memory,
                services.llm,
                idle_minutes=settings.memory.chat_idle_minutes,
                persona=settings.memory.persona,
                own_words=OwnWords(memory) if settings.memory.voice_tools else None,
            )
            adapter = None
            if settings.agora_configured:
                services.agora = build_agora_client(settings)
                services.calls, adapter = build_calls(settings, store, memory, services.agora, services.counters)
                services.live = build_live_recall(settings, memory, services.llm, services.calls)
            services.monitor = build_monitor(store, services.counters, services.agora, adapter)
            backend: CallPageBackend = adapter if adapter is not None else NoCalls()
            services.web = build_web_server(settings, backend, services.monitor, live_recall=services.live)
        yield services
    finally:
        await services.stop_background()
        if services.monitor is not None:
            await services.monitor.close()
        if services.agora is not None:
            await services.agora.aclose()
        if services.llm is not None:
            await services.llm.aclose()
        if services.embeddings is not None:
            await services.embeddings.aclose()
        if not await memory.wait_scrubbed(within=SHUTDOWN_SCRUB_WAIT_SECONDS):
            log.warning("deleted memory is still in the database file; it is scrubbed at the next start")
        await memory.stop_scrubbing()
        await store.close()
        if keys is not None:
            await keys.close()
