"""One place that assembles the real services against the local stand-ins (Agora emulator, fake LLM), for the
call, cog, end-to-end tests and the benchmarks."""

from __future__ import annotations

import asyncio
import inspect
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.agora import ConvoAIClient
from bot.app import (
    build_agora_client,
    build_calls,
    build_dense_retrieval,
    build_live_recall,
    build_llm_client,
    build_monitor,
    build_web_server,
)
from bot.calls.page import CallPageAdapter
from bot.calls.service import CallEnded, CallService, CallTimings
from bot.config import Settings
from bot.memory.dense import MemberEmbedder
from bot.memory.live import LiveRecall
from bot.memory.service import MemoryService
from bot.monitor import Counters, Monitor
from bot.store.postgres import PostgresStore
from bot.store.repository import Store
from bot.store.sqlite import SqliteStore
from bot.web.server import WebServer
from standins.agora_emulator import (
    TEST_APP_CERTIFICATE,
    TEST_APP_ID,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
    TEST_WEBHOOK_SECRET,
    AgoraEmulator,
)
from standins.discord_gateway import FakeDiscord


async def eventually(predicate: Callable[[], Awaitable[bool] | bool], *, within: float = 10.0) -> None:
    """Wait until `predicate` holds, for conditions produced by another process or a browser."""
    deadline = time.monotonic() + within
    for _ in iter(int, 1):
        result = predicate()
        if (await result) if inspect.isawaitable(result) else result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within} s")
        await asyncio.sleep(0.02)


async def settled(value: Callable[[], object], *, quiet: float, within: float = 10.0) -> None:
    """Wait until ``value()`` has stayed the same for ``quiet`` seconds (work on another thread has finished)."""
    deadline = time.monotonic() + within
    last, since = value(), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            raise AssertionError(f"still changing after {within} s")
        await asyncio.sleep(quiet / 10)
        current = value()
        if current != last:
            last, since = current, time.monotonic()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeClock:
    """Wall-clock time that tests can move forward."""

    def __init__(self, start: float | None = None):
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_settings(tmp_path: Path, **sections: dict[str, Any]) -> Settings:
    data: dict[str, dict[str, Any]] = {
        "discord": {"token": "fake-token", "call_cooldown_seconds": 0},
        "agora": {
            "app_id": TEST_APP_ID,
            "app_certificate": TEST_APP_CERTIFICATE,
            "customer_id": TEST_CUSTOMER_ID,
            "customer_secret": TEST_CUSTOMER_SECRET,
            "webhook_secret": TEST_WEBHOOK_SECRET,
            "api_base_url": "http://127.0.0.1:9/unset",
            "checkpoint_seconds": 3600,
        },
        "web": {"public_url": "http://127.0.0.1:8080", "link_signing_key": "test-link-key", "port": 0},
        "memory": {"database_path": str(tmp_path / "bot.db")},
        "calls": {"shutdown_grace_seconds": 2, "page_close_grace_seconds": 0},
    }
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return Settings.model_validate(data)


@dataclass
class EndedLog:
    """A call listener that records what ended."""

    ended: list[CallEnded] = field(default_factory=list)

    async def call_ended(self, ended: CallEnded) -> None:
        self.ended.append(ended)


@dataclass
class CallWorld:
    settings: Settings
    emu: AgoraEmulator
    store: Store
    memory: MemoryService
    agora: ConvoAIClient
    calls: CallService
    web: WebServer
    clock: FakeClock
    log: EndedLog
    adapter: CallPageAdapter
    monitor: Monitor
    live: LiveRecall | None = None
    embedder: MemberEmbedder | None = None
    """With ``llm.embedding_model``: the post-call queue's embedding step (dense retrieval is on in ``memory``)."""
    timings: CallTimings | None = None
    """The call service's timings when a test shortened them (a restarted service keeps them)."""

    async def start_member_call(self, user_id: int, *, private: bool = False) -> tuple[str, str]:
        """A consenting member starts a call and joins it (the greeting is spoken); returns (call_id, agent_id)."""
        await self.store.set_consent(user_id, True, self.clock())
        started = await self.calls.start(user_id=user_id, guild_id=1, private=private)
        agent = self.emu.agent_by_label("call_id", started.call_id)
        self.emu.user_joined(agent.agent_id)
        return started.call_id, agent.agent_id

    async def call_lines(self, call_id: str) -> list[tuple[str, str]]:
        """The call's stored lines, in order, as (role, text)."""
        return [(t.role, t.content) for t in await self.store.call_turns(call_id)]

    async def restart(self) -> CallService:
        """A new call service over the same database, as after a bot restart (the old one is shut down)."""
        if not self.calls.closed:
            await self.calls.shutdown(grace_seconds=1)
        self.calls = CallService(
            self.store,
            self.memory,
            self.agora,
            self.settings,
            clock=self.clock,
            run_checkpoints=False,
            counters=self.monitor.counters,
            timings=self.timings,
        )
        self.calls.add_listener(self.log)
        self.adapter.calls = self.calls
        if self.live is not None:
            self.live._authorize = self.calls.call_for_llm_key
        return self.calls


@asynccontextmanager
async def call_world(
    tmp_path: Path,
    *,
    webhooks: bool = True,
    checkpoints: bool = False,
    start_web: bool = True,
    sdk_url: str = "http://127.0.0.1:9/sdk.js",
    database_url: str | None = None,
    llm_base_url: str | None = None,
    busy_timeout_ms: int = 5000,
    timings: CallTimings | None = None,
    **sections: dict[str, Any],
) -> AsyncIterator[CallWorld]:
    """Store, memory, Agora client, call service and web server, wired to a running Agora emulator.

    With `start_web=False` the caller starts `world.web` (the bot does, in its setup hook, so that the web
    server's request handlers run as the bot's own work); its port is reserved here so URLs are known.
    With `llm_base_url` (a fake LLM), live recall is on: the web server serves the agent's LLM route at its real
    address, which is `web.public_url`."""
    clock = FakeClock()
    emu = AgoraEmulator(clock=clock)
    await emu.start()
    port = 0 if start_web and llm_base_url is None else free_port()
    if llm_base_url is not None:
        sections = {**sections, "llm": {"base_url": llm_base_url, "model": "fake-model", **sections.get("llm", {})}}
        sections["web"] = {"public_url": f"http://127.0.0.1:{port}", **sections.get("web", {})}
    settings = make_settings(tmp_path, **sections)
    settings = settings.model_copy(update={"agora": settings.agora.model_copy(update={"api_base_url": emu.base_url})})
    store: Store = (
        PostgresStore(database_url)
        if database_url
        else SqliteStore(settings.memory.database_path, busy_timeout_ms=busy_timeout_ms)
    )
    await store.open()
    memory = MemoryService(store, budget_tokens=settings.memory.context_budget_tokens, persona=settings.memory.persona)
    # The bot's own builders (bot.app), so the tests wire the services as the bot does.
    embedder = build_dense_retrieval(settings, store, memory)
    agora = build_agora_client(settings, timeout=5, backoff_base=0.001, backoff_max=0.01)
    counters = Counters()
    calls, adapter = build_calls(
        settings, store, memory, agora, counters, clock=clock, run_checkpoints=checkpoints, timings=timings
    )
    log = EndedLog()
    calls.add_listener(log)
    llm = build_llm_client(settings) if settings.live_recall_enabled else None
    live = build_live_recall(settings, memory, llm, calls)
    monitor = build_monitor(store, counters, agora, adapter, clock=clock)
    web = build_web_server(settings, adapter, monitor, host="127.0.0.1", port=port, sdk_url=sdk_url, live_recall=live)
    if start_web:
        await web.start()
    if webhooks:
        emu.webhook_url = f"{web.url}/agora/webhook"
    world = CallWorld(
        settings, emu, store, memory, agora, calls, web, clock, log, adapter, monitor, live, embedder, timings
    )
    try:
        yield world
    finally:
        await world.calls.shutdown(grace_seconds=1)
        await memory.wait_scrubbed()
        await web.stop()
        if live is not None:
            await live.wait_idle()
        if llm is not None:
            await llm.aclose()
        if embedder is not None:
            await embedder.client.aclose()
        await monitor.close()
        await agora.aclose()
        await emu.stop()
        await store.close()


@contextmanager
def fake_discord_in_thread(monkeypatch: Any) -> Iterator[FakeDiscord]:
    """The fake Discord on its own event loop in a thread, for tests that call `python -m bot`'s `main()`
    (which runs its own loop with asyncio.run). discord.py is pointed at it for the test."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fake-discord", daemon=True)
    thread.start()
    fake = FakeDiscord()
    try:
        asyncio.run_coroutine_threadsafe(fake.start(), loop).result(timeout=10)
        fake.patch(monkeypatch)
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
