"""Benchmark of the call lifecycle: many concurrent calls against the Agora emulator in another process.

Starts ``python -m standins.agora_emulator`` as a subprocess, assembles the real store (a temp SQLite file),
MemoryService, ConvoAIClient and CallService in this process, and runs ``--calls`` calls at once (default 200).
Each call: ``CallService.start``, the member joins (emulator control), ``--turns`` scripted turns in batches of
``--batch`` with a ``CallService.checkpoint`` after every batch but the last (so the final history read of the
hang-up must capture the last batch), then ``CallService.hang_up``. Checkpoints are driven here, not by the
background loop (``run_checkpoints=False``).

Reported:

* p50/p99 of start, checkpoint and finalize (hang-up): wall time; the time on the wire with Agora inside the
  operation (a transport wrapper hands each request an httpcore trace callback that adds the time from connect,
  or sending the headers on a kept-alive connection, to the response body read, into a per-operation contextvar
  accumulator); and "bot-side" = wall minus that. The emulator runs in its own process, so its CPU does not
  slow this one. "Bot-side" includes waiting for this process's event loop and SQLite thread, which all calls
  share, and waiting for a pooled connection; the Agora time still includes the event loop's delay in noticing
  a response that has arrived.
* turns lost (expected greeting + turns per call, missing from the store) and duplicated (stored turns not in
  the expected list), plus calls whose stored turns are not exactly the expected list in order; any of these,
  or a call that failed, exits 1.
* the database inside each operation: round trips (SQLite: jobs handed to aiosqlite's database thread;
  PostgreSQL: statements sent on a connection, a transaction's BEGIN and COMMIT included) and the time spent
  awaiting them ("db"), plus, on PostgreSQL, the time spent waiting for a pooled connection ("pool wait"). For
  SQLite, waiting for the store's lock is bot-side. Counted by wrapping the drivers' internal entry points in this
  process (``aiosqlite.Connection._execute``, ``asyncpg.Connection._execute``/``_executemany``/``execute``,
  ``asyncpg.Pool._acquire``), so nothing in the bot changes for the measurement.
* CPU seconds per call: this process's CPU over the run (``time.process_time``, all threads: the event loop and
  the SQLite thread), divided by the calls. The emulator controls (member joins, scripted turns) are sent from a
  separate driver thread, whose CPU is also shown and subtracted for the "bot" figure.

    .venv/bin/python bench/calls.py [--calls 200] [--turns 20] [--batch 4] [--seed 1] [--pool N]
        [--backends sqlite,postgresql] [--postgres-url URL] [--db-pool N]

``--db-pool`` sizes the PostgreSQL connection pool (``memory.pool_size``; default: the setting's default).

The ConvoAIClient sends its requests through the bot's own transport (`bot.agora.pools.PooledTransport`: several
small pools, as in production) unless ``--pool`` replaces it with one httpx pool, for comparison: ``--pool N``
keeps N connections open (``max_connections`` and ``max_keepalive_connections`` of N), ``--pool 0`` takes httpx's
defaults (100 connections, 20 kept alive).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import aiosqlite  # noqa: E402
import asyncpg  # noqa: E402
import httpx  # noqa: E402

from bot import loop as event_loop  # noqa: E402
from bot.agora import ConvoAIClient  # noqa: E402
from bot.agora.pools import CONNECTIONS_PER_POOL, POOLS, PooledTransport  # noqa: E402
from bot.calls.service import CallService  # noqa: E402
from bot.memory import tokens  # noqa: E402
from bot.memory.service import MemoryService  # noqa: E402
from bot.store.postgres import PostgresStore  # noqa: E402
from bot.store.repository import Store  # noqa: E402
from bot.store.sqlite import SqliteStore  # noqa: E402
from standins.agora_emulator import (  # noqa: E402
    API_PREFIX,
    CONTROL_PREFIX,
    TEST_APP_ID,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
)
from standins.harness import make_settings  # noqa: E402
from standins.postgres import running_cluster  # noqa: E402

T = TypeVar("T")

GUILD_ID = 77
FIRST_USER_ID = 500_000
OPERATIONS = ("start", "checkpoint", "finalize")
WORDS = (
    "garden",
    "birthday",
    "flight",
    "coffee",
    "guitar",
    "sister",
    "rent",
    "deadline",
    "doctor",
    "kitchen",
    "holiday",
    "laptop",
    "meeting",
    "music",
    "project",
    "school",
    "subscription",
    "dinner",
    "insurance",
    "payment",
    "appointment",
    "dog",
    "cat",
    "city",
    "family",
    "job",
    "order",
    "plan",
)


# ---- timing the Agora requests ---------------------------------------------------------------------------


@dataclass
class AgoraTime:
    """Time spent on the wire with Agora, and with the database, during one bot operation."""

    seconds: float = 0.0
    requests: int = 0
    connections: int = 0
    timed: int = 0
    db_seconds: float = 0.0
    db_trips: int = 0
    pool_wait: float = 0.0


_agora_time: contextvars.ContextVar[AgoraTime | None] = contextvars.ContextVar("bench_agora_time", default=None)


class _RequestTrace:
    """httpcore ``trace`` callback: times one request from connecting (or, on a kept-alive connection, sending
    its headers) until its response body is read or the exchange fails. Waiting for a pooled connection and
    the pool's bookkeeping before and after are the bot's own work and stay out."""

    OPENS = ("connection.connect_tcp.started", "http11.send_request_headers.started")
    CLOSES = ("http11.receive_response_body.complete",)

    def __init__(self, acc: AgoraTime) -> None:
        self._acc = acc
        self._opened: float | None = None

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        if name == "connection.connect_tcp.started":
            self._acc.connections += 1
        if self._opened is None:
            if name in self.OPENS:
                self._opened = time.perf_counter()
        elif name in self.CLOSES or name.endswith(".failed"):
            self._acc.seconds += time.perf_counter() - self._opened
            self._acc.timed += 1
            self._opened = None


class TimedTransport(httpx.AsyncBaseTransport):
    """Wraps the ConvoAIClient's transport: each request made while an operation is measured gets a trace
    callback that adds its time on the wire to that operation's accumulator (a contextvar)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        acc = _agora_time.get()
        if acc is not None:
            acc.requests += 1
            request.extensions = {**request.extensions, "trace": _RequestTrace(acc)}
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


# ---- counting the database round trips --------------------------------------------------------------------


@contextmanager
def counting_database_trips() -> Iterator[None]:
    """Wrap the drivers' entry points so that each database round trip made inside a measured operation is
    counted and timed into that operation's accumulator; restored on exit."""

    def timed(original: Any, *, trips: bool = True, field_name: str = "db_seconds") -> Any:
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            acc = _agora_time.get()
            if acc is None:
                return await original(*args, **kwargs)
            began = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                setattr(acc, field_name, getattr(acc, field_name) + time.perf_counter() - began)
                acc.db_trips += trips

        return wrapper

    pg_execute = asyncpg.Connection.execute

    async def execute(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        if args:  # goes through _execute, counted there
            return await pg_execute(self, query, *args, **kwargs)
        return await timed(pg_execute)(self, query, **kwargs)

    patches = [
        (aiosqlite.Connection, "_execute", timed(aiosqlite.Connection._execute)),
        (asyncpg.Connection, "_execute", timed(asyncpg.Connection._execute)),
        (asyncpg.Connection, "_executemany", timed(asyncpg.Connection._executemany)),
        (asyncpg.Connection, "execute", execute),
        (asyncpg.pool.Pool, "_acquire", timed(asyncpg.pool.Pool._acquire, trips=False, field_name="pool_wait")),
    ]
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
    for owner, name, replacement in patches:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


@dataclass
class Samples:
    wall: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPERATIONS})
    agora: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPERATIONS})
    requests: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OPERATIONS, 0))
    db: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPERATIONS})
    pool_wait: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPERATIONS})
    db_trips: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OPERATIONS, 0))
    connections: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OPERATIONS, 0))
    cpu: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPERATIONS})
    untimed: int = 0

    @asynccontextmanager
    async def measure(self, operation: str) -> AsyncIterator[None]:
        acc = AgoraTime()
        token = _agora_time.set(acc)
        cpu_began = time.process_time()
        began = time.perf_counter()
        try:
            yield
        finally:
            wall = time.perf_counter() - began
            self.cpu[operation].append(time.process_time() - cpu_began)  # meaningful only for one call at a time
            _agora_time.reset(token)
            self.wall[operation].append(wall)
            self.agora[operation].append(acc.seconds)
            self.requests[operation] += acc.requests
            self.connections[operation] += acc.connections
            self.db[operation].append(acc.db_seconds)
            self.pool_wait[operation].append(acc.pool_wait)
            self.db_trips[operation] += acc.db_trips
            self.untimed += acc.requests - acc.timed


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


# ---- the emulator process and its controls ---------------------------------------------------------------


class EmulatorProcess:
    def __init__(self, max_concurrent: int) -> None:
        self.max_concurrent = max_concurrent
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    @property
    def root_url(self) -> str:
        return self.base_url.removesuffix(API_PREFIX)

    def start(self, ready_within: float = 30.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "standins.agora_emulator", "--port", "0"]
            + ["--max-concurrent", str(self.max_concurrent)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(ready_within)
        words = line[0].split() if line else []
        if len(words) != 3 or words[:2] != ["agora-emulator", "ready"]:
            self.stop()
            raise RuntimeError(f"the emulator did not report ready (got {line!r})")
        self.base_url = words[2]

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None


class Driver:
    """The emulator's test controls, sent from a thread with its own event loop so that their CPU can be told
    apart from the bot's (``time.thread_time`` there). aiohttp, not httpx: it costs a fraction of the CPU per
    request, which keeps the driver from competing with the bot for the GIL."""

    def __init__(self, control_url: str) -> None:
        self.control_url = control_url
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="bench-driver", daemon=True)
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Driver:
        self._thread.start()
        await self._run(self._open())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._run(self._close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.to_thread(self._thread.join)
        self.loop.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> Awaitable[T]:
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    async def _open(self) -> None:
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=64), timeout=aiohttp.ClientTimeout(total=30)
        )

    async def _close(self) -> None:
        assert self._http is not None
        await self._http.close()

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        assert self._http is not None
        async with self._http.request(method, self.control_url + path, **kwargs) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"emulator control {method} {path}: HTTP {response.status} {body[:200]!r}")
        return json.loads(body)

    async def cpu_seconds(self) -> float:
        async def thread_time() -> float:
            return time.thread_time()

        return await self._run(thread_time())

    async def agent_for_call(self, call_id: str) -> str:
        data = await self._run(self._request("GET", "/agents", params={"label": f"call_id={call_id}"}))
        agents = data["agents"]
        if len(agents) != 1:
            raise RuntimeError(f"expected one agent for call {call_id}, found {len(agents)}")
        return str(agents[0]["agent_id"])

    async def user_joined(self, agent_id: str) -> None:
        await self._run(self._request("POST", f"/agents/{agent_id}/user_joined"))

    async def script(self, agent_id: str, messages: Sequence[tuple[str, str]]) -> None:
        body = {"messages": [list(m) for m in messages]}
        await self._run(self._request("POST", f"/agents/{agent_id}/script", json=body))

    async def stats(self) -> dict[str, Any]:
        return await self._run(self._request("GET", "/stats"))


# ---- the run ---------------------------------------------------------------------------------------------


@dataclass
class CallOutcome:
    user_id: int
    expected: list[tuple[str, str]]
    call_id: str | None = None
    error: str | None = None


@dataclass
class Result:
    calls: int
    turns: int
    batch: int
    seed: int
    pool: int | None
    db_pool: int | None
    samples: Samples
    solo_samples: Samples
    outcomes: list[CallOutcome]
    expected_turns: int
    stored_turns: int
    lost: int
    duplicated: int
    out_of_order: int
    run_seconds: float
    cpu_seconds: float
    driver_cpu_seconds: float
    emulator_stats: dict[str, Any]
    emulator_pid: int

    @property
    def failed_calls(self) -> list[CallOutcome]:
        return [o for o in self.outcomes if o.error is not None]

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.out_of_order or self.failed_calls)


def script_for(rng: random.Random, call_index: int, turns: int) -> list[tuple[str, str]]:
    lines = []
    for t in range(turns):
        role = "user" if t % 2 == 0 else "assistant"
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16)))
        lines.append((role, f"call {call_index} turn {t}: {words}"))
    return lines


class TurnCheck(NamedTuple):
    lost: int
    duplicated: int
    in_order: bool


def check_turns(expected: Sequence[tuple[str, str]], stored: Sequence[tuple[str, str]]) -> TurnCheck:
    """Lost: expected turns missing from the store; duplicated: stored turns beyond the expected ones (a repeat,
    or anything that was never said); in order: the store holds exactly the expected list."""
    want, have = Counter(expected), Counter(stored)
    return TurnCheck(
        lost=sum((want - have).values()),
        duplicated=sum((have - want).values()),
        in_order=list(stored) == list(expected),
    )


def batches_of(lines: list[tuple[str, str]], size: int) -> list[list[tuple[str, str]]]:
    return [lines[i : i + size] for i in range(0, len(lines), size)]


async def run(
    *,
    calls: int = 200,
    turns: int = 20,
    batch: int = 4,
    seed: int = 1,
    pool: int | None = None,
    workdir: Path | None = None,
    database_url: str | None = None,
    db_pool: int | None = None,
    solo: int = 10,
) -> Result:
    if calls < 1 or turns < 0 or batch < 1 or solo < 0 or (pool is not None and pool < 0):
        raise ValueError("need --calls >= 1, --turns >= 0, --batch >= 1, --pool >= 0")
    with tempfile.TemporaryDirectory(prefix="bench-calls-") as tmp:
        return await _run(
            Path(workdir or tmp),
            calls=calls,
            turns=turns,
            batch=batch,
            seed=seed,
            pool=pool,
            database_url=database_url,
            db_pool=db_pool,
            solo=solo,
        )


async def _run(
    tmp: Path,
    *,
    calls: int,
    turns: int,
    batch: int,
    seed: int,
    pool: int | None,
    database_url: str | None,
    db_pool: int | None,
    solo: int,
) -> Result:
    rng = random.Random(seed)
    emulator = EmulatorProcess(max_concurrent=max(250, calls))
    await asyncio.to_thread(emulator.start)
    emulator_pid = emulator.proc.pid if emulator.proc else 0
    async with AsyncExitStack() as stack:
        stack.push_async_callback(asyncio.to_thread, emulator.stop)
        settings = make_settings(
            tmp,
            agora={"api_base_url": emulator.base_url, "max_concurrent_agents": max(200, calls)},
            calls={"calls_per_member_per_day": 1000},
        )
        store: Store = (
            PostgresStore(
                database_url,
                min_connections=min(2, db_pool or settings.memory.pool_size),
                max_connections=db_pool or settings.memory.pool_size,
            )
            if database_url
            else SqliteStore(settings.memory.database_path)
        )
        await store.open()
        db_pool_size = store.pool.get_max_size() if isinstance(store, PostgresStore) else None
        # As the bot does at start-up (bot/app.py): the tokenizer's vocabulary is loaded before the first call.
        await asyncio.to_thread(tokens.encoding)
        stack.push_async_callback(store.close)
        memory = MemoryService(  # as bot/app.py builds it
            store,
            budget_tokens=settings.memory.context_budget_tokens,
            persona=settings.memory.persona,
            read_ahead=settings.live_recall_enabled,
        )
        stack.push_async_callback(memory.wait_scrubbed)
        inner: httpx.AsyncBaseTransport
        if pool is None:
            inner = PooledTransport()
        elif pool:
            inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool))
        else:
            inner = httpx.AsyncHTTPTransport()
        agora = ConvoAIClient(
            base_url=emulator.base_url,
            app_id=TEST_APP_ID,
            customer_id=TEST_CUSTOMER_ID,
            customer_secret=TEST_CUSTOMER_SECRET,
            timeout=settings.agora.request_timeout_seconds,
            transport=TimedTransport(inner),
        )
        stack.push_async_callback(agora.aclose)
        service = CallService(store, memory, agora, settings, run_checkpoints=False)
        stack.push_async_callback(service.shutdown, 1)

        greeting = ("assistant", settings.agora.greeting)
        outcomes = [CallOutcome(FIRST_USER_ID + i, [greeting, *script_for(rng, i, turns)]) for i in range(calls)]
        solo_outcomes = [
            CallOutcome(FIRST_USER_ID + calls + i, [greeting, *script_for(rng, calls + i, turns)]) for i in range(solo)
        ]
        for outcome in outcomes + solo_outcomes:
            await store.set_consent(outcome.user_id, True, time.time())
        launch_order = list(outcomes)
        rng.shuffle(launch_order)
        samples = Samples()
        solo_samples = Samples()
        driver = await stack.enter_async_context(Driver(emulator.root_url + CONTROL_PREFIX))

        async def one_call(outcome: CallOutcome, samples: Samples) -> None:
            try:
                async with samples.measure("start"):
                    started = await service.start(user_id=outcome.user_id, guild_id=GUILD_ID)
                outcome.call_id = started.call_id
                agent_id = await driver.agent_for_call(started.call_id)
                await driver.user_joined(agent_id)
                chunks = batches_of(outcome.expected[1:], batch)
                for index, chunk in enumerate(chunks):
                    await driver.script(agent_id, chunk)
                    if index < len(chunks) - 1:  # the last batch is for the hang-up's final history read
                        async with samples.measure("checkpoint"):
                            if not await service.checkpoint(started.call_id):
                                raise RuntimeError("checkpoint reported the call over")
                async with samples.measure("finalize"):
                    await service.hang_up(outcome.user_id)
            except Exception as exc:
                outcome.error = f"{type(exc).__name__}: {exc}"

        with counting_database_trips():
            for outcome in solo_outcomes:  # one at a time first: the CPU each operation costs on its own
                await one_call(outcome, solo_samples)
        driver_cpu_before = await driver.cpu_seconds()
        cpu_before = time.process_time()
        began = time.perf_counter()
        with counting_database_trips():
            await asyncio.gather(*(one_call(o, samples) for o in launch_order))
        run_seconds = time.perf_counter() - began
        cpu_seconds = time.process_time() - cpu_before
        driver_cpu_seconds = await driver.cpu_seconds() - driver_cpu_before
        emulator_stats = await driver.stats()

        expected_turns = stored_turns = lost = duplicated = out_of_order = 0
        for outcome in outcomes + solo_outcomes:
            stored = []
            if outcome.call_id is not None:
                stored = [(t.role, t.content) for t in await store.call_turns(outcome.call_id)]
            check = check_turns(outcome.expected, stored)
            expected_turns += len(outcome.expected)
            stored_turns += len(stored)
            lost += check.lost
            duplicated += check.duplicated
            out_of_order += not check.in_order
    return Result(
        calls=calls,
        turns=turns,
        batch=batch,
        seed=seed,
        pool=pool,
        db_pool=db_pool_size,
        samples=samples,
        solo_samples=solo_samples,
        outcomes=outcomes + solo_outcomes,
        expected_turns=expected_turns,
        stored_turns=stored_turns,
        lost=lost,
        duplicated=duplicated,
        out_of_order=out_of_order,
        run_seconds=run_seconds,
        cpu_seconds=cpu_seconds,
        driver_cpu_seconds=driver_cpu_seconds,
        emulator_stats=emulator_stats,
        emulator_pid=emulator_pid,
    )


# ---- report ----------------------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:10.1f}"


def report(result: Result) -> str:
    s = result.samples
    checkpoints = max(0, -(-result.turns // result.batch) - 1)
    pool = (
        f"the bot's Agora transport ({POOLS} pools of {CONNECTIONS_PER_POOL} connections)"
        if result.pool is None
        else f"one pool of {result.pool}"
        if result.pool
        else "one httpx default pool (100, 20 kept alive)"
    )
    lines = [
        f"bench/calls.py: {result.calls} concurrent calls x {result.turns} turns, batches of {result.batch} "
        f"({checkpoints} checkpoints + hang-up per call), seed {result.seed}, {pool}"
        + (f", PostgreSQL pool {result.db_pool}" if result.db_pool else ""),
        f"run {result.run_seconds:.2f} s wall; emulator in process {result.emulator_pid}",
        "",
        f"{'ms':<10}{'n':>5}  "
        + " ".join(f"{h:>10}" for h in ("wall p50", "wall p99", "bot p50", "bot p99", "agora p50", "agora p99"))
        + "  req/op  new conn/op",
    ]
    for op in OPERATIONS:
        wall, agora = s.wall[op], s.agora[op]
        bot = [w - a for w, a in zip(wall, agora, strict=True)]
        per_op = s.requests[op] / len(wall) if wall else 0.0
        connects = s.connections[op] / len(wall) if wall else 0.0
        columns = [percentile(v, q) for v in (wall, bot, agora) for q in (50, 99)]
        cells = " ".join(_ms(c) for c in columns)
        lines.append(f"{op:<10}{len(wall):>5}  {cells}  {per_op:6.2f}  {connects:11.2f}")
    lines.append("(bot = wall - time on the wire with Agora, per operation; new conn = Agora connections opened)")
    lines += [
        "",
        f"{'database':<10}{'n':>5}  "
        + " ".join(f"{h:>10}" for h in ("db p50", "db p99", "pool p50", "pool p99"))
        + "  trips/op",
    ]
    for op in OPERATIONS:
        db, wait = s.db[op], s.pool_wait[op]
        trips = s.db_trips[op] / len(db) if db else 0.0
        columns = [percentile(v, q) for v in (db, wait) for q in (50, 99)]
        lines.append(f"{op:<10}{len(db):>5}  " + " ".join(_ms(c) for c in columns) + f"  {trips:8.2f}")
    lines.append(
        "(db = awaiting database round trips inside the operation; pool = waiting for a PostgreSQL connection)"
    )
    if s.untimed:
        lines.append(f"WARNING: {s.untimed} Agora requests were not timed (no httpcore trace events)")
    bot_cpu = result.cpu_seconds - result.driver_cpu_seconds
    ops = result.emulator_stats.get("operations", {})
    statuses = result.emulator_stats.get("statuses", {})
    errors = sum(n for by in statuses.values() for status, n in by.items() if not status.startswith("2"))
    solo = result.solo_samples
    if solo.cpu["start"]:
        measured = [op for op in OPERATIONS if solo.cpu[op]]  # no checkpoints when all turns fit one batch
        cpu = {op: statistics.mean(solo.cpu[op]) for op in measured}
        wall = {op: statistics.mean(solo.wall[op]) for op in measured}
        trips = {op: solo.db_trips[op] / len(solo.cpu[op]) for op in measured}
        floor = cpu["start"] * result.calls * 0.99
        lines += [
            "",
            f"one call at a time ({len(solo.cpu['start'])} calls before the burst), mean per operation:",
            "  "
            + "; ".join(
                f"{op} {cpu[op] * 1000:.2f} ms CPU, {wall[op] * 1000:.1f} ms wall, {trips[op]:.0f} db trips"
                for op in measured
            ),
            f"  CPU floor of the burst's start p99 on one event loop: 0.99 x {result.calls} x {cpu['start'] * 1000:.2f}"
            f" ms = {floor * 1000:.0f} ms (the starts share this process's CPU; any wait for a core adds to it)",
        ]
    lines += [
        "",
        f"turns lost: {result.lost}   duplicated: {result.duplicated}   calls out of order: {result.out_of_order}   "
        f"(expected {result.expected_turns}, stored {result.stored_turns})",
        f"failed calls: {len(result.failed_calls)}",
        f"CPU per call: {result.cpu_seconds / result.calls * 1000:.2f} ms (bench process {result.cpu_seconds:.2f} s"
        f" / {result.calls}); bot only {bot_cpu / result.calls * 1000:.2f} ms "
        f"(minus driver thread {result.driver_cpu_seconds:.2f} s)",
        "Agora requests seen by the emulator: "
        + ", ".join(f"{op} {n}" for op, n in sorted(ops.items()))
        + f"; non-2xx {errors}",
    ]
    for outcome in result.failed_calls[:5]:
        lines.append(f"  call of user {outcome.user_id} failed: {outcome.error}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--pool",
        type=int,
        default=None,
        help="one Agora connection pool of N instead of the bot's transport; 0 = httpx defaults",
    )
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    parser.add_argument("--postgres-url", help="an empty PostgreSQL database (default: a throwaway local cluster)")
    parser.add_argument(
        "--solo", type=int, default=10, help="calls run one at a time before the burst, to measure CPU per operation"
    )
    parser.add_argument(
        "--db-pool", type=int, default=None, help="PostgreSQL pool size (default: memory.pool_size's default)"
    )
    args = parser.parse_args(argv)
    results: dict[str, Result] = {}
    for backend in args.backends.split(","):
        with ExitStack() as clusters:
            url = None
            if backend == "postgresql":
                url = args.postgres_url or clusters.enter_context(contextmanager(running_cluster)()).new_database()
            results[backend] = event_loop.run(  # the bot's event loop (uvloop), as `python -m bot run` runs it
                run(
                    calls=args.calls,
                    turns=args.turns,
                    batch=args.batch,
                    seed=args.seed,
                    pool=args.pool,
                    database_url=url,
                    db_pool=args.db_pool,
                    solo=args.solo,
                )
            )
        print(f"== {backend}")
        print(report(results[backend]))
        print()
    print(side_by_side(results))
    return 0 if all(r.ok for r in results.values()) else 1


def side_by_side(results: dict[str, Result]) -> str:
    """Start and finalize p99 (wall and bot-side) of each backend, next to the 100 ms target."""
    lines = [f"{'p99 ms':<22}" + "".join(f"{name:>14}" for name in results) + "   target"]
    for op in ("start", "finalize"):
        for kind in ("wall", "bot"):
            row = []
            for result in results.values():
                wall, agora = result.samples.wall[op], result.samples.agora[op]
                values = wall if kind == "wall" else [w - a for w, a in zip(wall, agora, strict=True)]
                row.append(percentile(values, 99) * 1000)
            lines.append(f"{op + ' (' + kind + ')':<22}" + "".join(f"{v:14.1f}" for v in row) + "   <= 100")
    lines.append(
        f"{'turns lost/duplicated':<22}"
        + "".join(f"{str(r.lost) + '/' + str(r.duplicated):>14}" for r in results.values())
        + "   0/0"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
