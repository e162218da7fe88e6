"""Benchmark of live recall: what the bot's LLM route adds to each voice turn.

Fills a SQLite store with ``--members`` members, each with 5,000 turns and 500 facts (the bulk fill of
``bench/memory_store.py``), gives each member an active call with a live-recall key, and serves the real route
(``bot.web`` + ``bot.memory.live.LiveRecall`` + ``bot.llm.LLMClient``) in this process, the bot's. As in production,
where the voice agent (Agora ConvoAI) and the upstream LLM are other machines, both run in processes of their own: the
upstream is the fake LLM of the tests (``standins/llm_server/``) streaming a fixed-size reply, and the agent is
an HTTP client sending each request the way ConvoAI sends it with ``llm.vendor: "custom"`` (spec §4.11: persona, the
call-start memory message, the agent's last messages with their ``turn_id``, ``timestamp`` and ``metadata``, the new
user line, and at the top ``turn_id``, ``timestamp``, ``interruptable`` and ``model``). So the bot's process does only
the bot's work, and neither the agent's parsing nor the upstream's streaming competes with it for the event loop or
the GIL (both run on uvloop too, so that they take as little as they can of the cores they share with the bot here;
the agent's client is aiohttp's, which takes a third of the CPU httpx's did for the same turns: with httpx the agent
was the busiest of the three processes, and its own delays made up most of the direct path's p99).
Every proxied turn stores the user line, builds that utterance's memory and stores the reply, as in a real call.

For 1, 20 and 100 concurrent streams (each stream a different member's call in conversation: a turn through the
proxy, the same body straight to the upstream, a short pause, again; the upstream takes ``--stream-seconds`` to
stream a reply, like a real model, so that many streams are open at once; ``--burst`` starts every stream of a
level at the same instant instead), it prints side by side the time to first byte (TTFB) and to last byte (TTLB),
p50 and p99, measured by the agent, through the proxy and straight to the same upstream with the same body, and
the p99 TTFB the proxy adds (target: <= 10 ms at 20 streams); one untimed turn through each path comes first
(``warm_up``). Then the per-turn memory build alone (``MemoryService.build_context`` with the utterance as query,
leaving out the running call), p50/p99 (target: <= 5 ms p99), measured before the last pass since that one
pauses members' memory: the relay alone, the same level again with the members' memory paused. Before that, the
``--tools-level`` is run twice more, without and then with the memory tools offered to the model (remember,
correct, forget: ``memory.voice_tools``), and the bot's CPU per proxied turn of the two is compared (target: at most
1 ms more with the tools offered, when the model calls none). A machine-speed
check is printed before and after the levels: figures from runs whose speed differs are not comparable.

    .venv/bin/python bench/live_recall.py [--members 100] [--levels 1,20,100] [--rounds N] [--builds 300]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import random
import sqlite3
import sys
import tempfile
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from bench.memory_store import pct, sentence
from bot import loop as event_loop
from bot.agora import ConvoAIClient
from bot.agora.custom_llm import read_request
from bot.calls.llm_keys import hash_llm_key, new_llm_key
from bot.calls.page import CallPageAdapter
from bot.calls.service import CallService
from bot.llm import LLMClient
from bot.memory.context import MEMORY_HEADER
from bot.memory.live import LiveRecall
from bot.memory.own_words import OwnWords
from bot.memory.service import MemoryService
from bot.store.sqlite import SqliteStore
from bot.web.llm_route import LLM_ROUTE
from bot.web.server import WebServer
from standins.harness import make_settings
from standins.llm_server import FakeLLM

Results = dict[str, list[tuple[float, float]]]
TURNS_PER_MEMBER = 5000
FACTS_PER_MEMBER = 500
MAX_HISTORY = 32
LEVELS = (1, 20, 100)
SAMPLES = 2000
"""Turns per path at each level of several streams; 80 at one stream, where each takes a whole reply. A p99 is
the 20th-worst of 2,000 samples; of 400 it was the 4th-worst, and moved by several ms between back-to-back runs."""
PERSONA = "You are a warm, concise voice assistant."


def fill(path: Path, members: int, rng: random.Random) -> None:
    """Members 1..N, each with 50 ended calls of 100 turns and 500 facts, through the real schema."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = OFF")
    now = time.time()
    db.execute("BEGIN")
    for member in range(1, members + 1):
        calls, turns = [], []
        for _ in range(TURNS_PER_MEMBER // 100):
            call_id = uuid.uuid4().hex
            started = now - rng.uniform(1, 90 * 86400)
            calls.append((call_id, member, 7, call_id, call_id, 1, 2, "ended", 30, started, started + 600, "hangup", 1))
            for seq in range(100):
                role = "assistant" if seq % 2 == 0 else "user"
                turns.append((member, call_id, seq, role, sentence(rng), started + seq))
        db.executemany(
            "INSERT INTO calls (call_id, user_id, guild_id, channel, agent_name, user_uid, agent_uid, state, "
            "max_minutes, started_at, ended_at, end_reason, history_anchored) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            calls,
        )
        db.executemany(
            "INSERT INTO turns (user_id, call_id, seq, role, content, spoken_at, source) VALUES (?,?,?,?,?,?,'voice')",
            turns,
        )
        db.executemany(
            "INSERT INTO facts (user_id, text, created_at, updated_at, confirmed_at) VALUES (?, ?, ?, ?, ?)",
            [(member, sentence(rng, 8), now - i, now - i, now - i) for i in range(FACTS_PER_MEMBER)],
        )
        db.execute(
            "INSERT INTO users (user_id, memory_enabled, consent, consent_at, created_at) "
            "VALUES (?, 1, 'remember', ?, ?)",
            (member, now, now),
        )
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("ANALYZE")
    db.close()


def reply_text(reply_chars: int) -> str:
    return ("Sure, I remember that. " * 40)[:reply_chars]


def upstream_process(conn: Connection, reply_chars: int, stream_seconds: float) -> None:
    """The upstream LLM's process: the fake LLM streaming a fixed reply in ``stream_seconds``, until told to stop."""
    event_loop.run(_serve_upstream(conn, reply_chars, stream_seconds))


async def _serve_upstream(conn: Connection, reply_chars: int, stream_seconds: float) -> None:
    llm = FakeLLM(stream_chunk_size=12)
    reply = reply_text(reply_chars)
    llm.stream_delay = stream_seconds / max(1, -(-reply_chars // 12))
    llm.set_responder(lambda body: reply)
    await llm.start()
    try:
        conn.send(llm.base_url)
        await asyncio.to_thread(conn.recv)  # until told to stop
    finally:
        await llm.stop()


class Member:
    """One member's running call as the agent sees it: key, short-term history, turn counter."""

    def __init__(self, user_id: int, call_id: str, key: str, memory_message: str) -> None:
        self.user_id = user_id
        self.call_id = call_id
        self.key = key
        self.system = [{"role": "system", "content": PERSONA}, {"role": "system", "content": memory_message}]
        self.history: list[dict[str, Any]] = [
            {
                "role": "assistant",
                "content": "Hi! Good to hear from you.",
                "turn_id": 0,
                "timestamp": int(time.time() * 1000),
                "metadata": {"source": "greeting"},
            }
        ]
        self.turn = 0

    def request(self, rng: random.Random) -> dict[str, Any]:
        self.turn += 1
        now = int(time.time() * 1000)
        self.history.append(
            {
                "role": "user",
                "content": sentence(rng, 10),
                "turn_id": self.turn,
                "timestamp": now,
                "metadata": {"source": "asr", "user": str(self.user_id)},
            }
        )
        self.history = self.history[-MAX_HISTORY:]
        return {
            "messages": [*self.system, *self.history],
            "stream": True,
            "max_tokens": 400,
            "temperature": 0.7,
            "turn_id": self.turn,
            "timestamp": now,
            "interruptable": True,
            "model": "",
        }


async def timed_stream(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], key: str | None = None
) -> tuple[float, float]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    start = time.perf_counter()
    first = 0.0
    async with http.post(url, json=body, headers=headers) as response:
        if response.status != 200:
            raise RuntimeError(f"{url} answered {response.status}: {(await response.read())[:200]!r}")
        async for chunk in response.content.iter_any():
            if chunk and not first:
                first = time.perf_counter() - start
    return first, time.perf_counter() - start


def agent_process(conn: Connection, calls: list[tuple[int, str, str, str]], options: dict[str, Any]) -> None:
    """The voice agent's process: one ``Member`` per call; for each level it is sent, it runs the members' turns
    and sends back the (TTFB, TTLB) samples of both paths."""
    event_loop.run(_run_agent(conn, calls, options))


async def _run_agent(conn: Connection, calls: list[tuple[int, str, str, str]], options: dict[str, Any]) -> None:
    rng = random.Random(options["seed"] + 1)  # not the fill's sentences
    members = [Member(*call) for call in calls]
    reply = reply_text(options["reply_chars"])
    connector = aiohttp.TCPConnector(limit=400)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as http:
        await warm_up(http, members[0], options, rng, reply)
        while (level := await asyncio.to_thread(conn.recv)) is not None:
            try:
                conn.send(await agent_level(http, level, members, options, rng, reply))
            except Exception as exc:  # the bot's process reports it and stops
                conn.send(exc)


async def both_paths(
    http: aiohttp.ClientSession, member: Member, options: dict[str, Any], rng: random.Random, reply: str
) -> tuple[tuple[float, float], tuple[float, float]]:
    """One turn of ``member``'s call through the proxy, then the same conversation straight to the upstream (as an
    agent whose LLM is not custom sends it: OpenAI's fields only): the (TTFB, TTLB) of each."""
    body = member.request(rng)
    proxy = await timed_stream(http, options["proxy_url"], body, member.key)
    member.history.append(
        {
            "role": "assistant",
            "content": reply,
            "turn_id": member.turn,
            "timestamp": int(time.time() * 1000),
            "metadata": {"source": "llm"},
        }
    )
    direct = read_request(body, body["messages"]).upstream
    return proxy, await timed_stream(http, options["direct_url"], direct | {"model": "fake-model"})


async def warm_up(
    http: aiohttp.ClientSession, member: Member, options: dict[str, Any], rng: random.Random, reply: str
) -> None:
    """One untimed turn through each path before any level: the first request a process serves or sends runs
    code for the first time (the agent's and the upstream's as much as the bot's), and the proxy's turn, sent
    first, would be charged for all three processes' (some 30-50 ms, the p99 of the one-stream level)."""
    await both_paths(http, member, options, rng, reply)


async def agent_level(
    http: aiohttp.ClientSession,
    level: int,
    members: list[Member],
    options: dict[str, Any],
    rng: random.Random,
    reply: str,
) -> Results:
    """One level of concurrent streams; the samples of both paths."""
    rounds = options["rounds"] or (80 if level == 1 else max(4, SAMPLES // level))
    results: Results = {"proxy": [], "direct": []}

    async def member_turns(member: Member, rounds: int = rounds) -> None:
        """One call in conversation: a turn through the proxy, the same body straight to the upstream, a short
        pause, again; started at a random moment so arrivals spread like real calls."""
        await asyncio.sleep(rng.uniform(0, options["stream_seconds"]))
        for _ in range(rounds):
            proxy, direct = await both_paths(http, member, options, rng, reply)
            results["proxy"].append(proxy)
            results["direct"].append(direct)
            await asyncio.sleep(rng.uniform(0, 0.05))

    if options["burst"]:
        for _ in range(rounds):
            await asyncio.gather(*(member_turns(m, 1) for m in members[:level]))
    else:
        await asyncio.gather(*(member_turns(m) for m in members[:level]))
    return results


def machine_speed() -> float:
    """Milliseconds a fixed pure-Python loop takes on this machine now (best of three). A shared machine's speed
    changes from minute to minute (by half, measured), so figures from runs whose speed differs are not comparable."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i * i
        best = min(best, time.perf_counter() - start)
    return best * 1000


class CollectorPauses:
    """The garbage collector's full collections in this process while in use, and how long each stopped it."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._began = 0.0

    def __enter__(self) -> CollectorPauses:
        gc.callbacks.append(self._observe)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._began)


async def measure_level(agent: Connection, level: int) -> tuple[float, float]:
    """Run one level in the agent's process, print its rows, return what the proxy adds to p99 TTFB and the bot
    process's CPU per proxied turn (both ms)."""
    cpu = time.process_time()
    with CollectorPauses() as collections:
        agent.send(level)
        results = await asyncio.to_thread(agent.recv)
    cpu = time.process_time() - cpu
    if isinstance(results, Exception):
        raise RuntimeError(f"the agent's process failed at {level} streams") from results
    for path_name in ("direct", "proxy"):
        samples = results[path_name]
        ttfb = [s[0] for s in samples]
        ttlb = [s[1] for s in samples]
        print(
            f"{level:>7} {path_name:<7} {len(samples):>5} {pct(ttfb, 50) * 1000:>9.2f} "
            f"{pct(ttfb, 99) * 1000:>9.2f} {pct(ttlb, 50) * 1000:>9.2f} {pct(ttlb, 99) * 1000:>9.2f}"
        )
    turns = len(results["proxy"])
    print(f"{level:>7} bot process CPU per proxied turn: {cpu / max(1, turns) * 1000:.2f} ms (all its threads)")
    pauses = collections.pauses
    longest = f", the longest {max(pauses) * 1000:.1f} ms" if pauses else ""
    print(f"{level:>7} full garbage collections in the bot process meanwhile: {len(pauses)}{longest}")
    added = (pct([s[0] for s in results["proxy"]], 99) - pct([s[0] for s in results["direct"]], 99)) * 1000
    return added, cpu / max(1, turns) * 1000


async def measure_builds(
    memory: MemoryService, members: list[tuple[int, str, str, str]], builds: int, rng: random.Random
) -> tuple[float, float]:
    """The per-turn memory build alone, ``builds`` times over the members in turn (each with their memory on):
    p50 and p99 in ms."""
    samples = []
    for n in range(builds):
        user_id, call_id, *_ = members[n % len(members)]
        query = sentence(rng, 10)
        start = time.perf_counter()
        context = await memory.build_context(user_id, query=query, exclude_call_id=call_id)
        samples.append(time.perf_counter() - start)
        if len(context) < 2:  # the persona alone: nothing was built, and nothing measured
            raise RuntimeError(f"member {user_id}'s build returned no memory (is their memory paused?)")
    return pct(samples, 50) * 1000, pct(samples, 99) * 1000


async def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    processes = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "live.db"
        store = SqliteStore(path)
        await store.open()
        await store.close()  # migrated schema
        began = time.perf_counter()
        fill(path, args.members, rng)
        print(
            f"filled {args.members} members x {TURNS_PER_MEMBER:,} turns, {FACTS_PER_MEMBER} facts "
            f"in {time.perf_counter() - began:.1f} s"
        )
        upstream_conn, upstream_end = processes.Pipe()
        upstream = processes.Process(
            target=upstream_process, args=(upstream_end, args.reply_chars, args.stream_seconds), daemon=True
        )
        upstream.start()
        upstream_end.close()  # the child's end: a child that dies is then an EOFError here, not a hang
        upstream_url = await asyncio.to_thread(upstream_conn.recv)
        store = SqliteStore(path)
        await store.open()
        settings = make_settings(Path(tmp), llm={"base_url": upstream_url, "model": "fake-model"})
        memory = MemoryService(store, budget_tokens=1500, persona=PERSONA)
        agora = ConvoAIClient(base_url="http://127.0.0.1:9/unused", app_id="x", customer_id="x", customer_secret="x")
        calls = CallService(store, memory, agora, settings, run_checkpoints=False)
        llm = LLMClient(base_url=upstream_url, model="fake-model", timeout=30)
        own_words = OwnWords(memory)
        live = LiveRecall(
            memory,
            llm,
            authorize=calls.call_for_llm_key,
            max_history=MAX_HISTORY,
            timeout_seconds=30,
            own_words=own_words,
        )
        web = WebServer(
            CallPageAdapter(
                calls,
                store,
                app_id=settings.agora.app_id or "",
                page_close_grace_seconds=settings.calls.page_close_grace_seconds,
            ),
            host="127.0.0.1",
            port=0,
            sdk_url="http://127.0.0.1:9/sdk.js",
            public_url="http://127.0.0.1:9",
            live_recall=live,
        )
        await web.start()
        members: list[tuple[int, str, str, str]] = []
        from standins.factories import make_call

        for user_id in range(1, args.members + 1):
            call_id = uuid.uuid4().hex
            key = new_llm_key(call_id)
            await store.create_call(make_call(user_id, call_id=call_id, state="active", llm_key_hash=hash_llm_key(key)))
            start_memory = await memory.build_context(user_id)
            memory_message = start_memory[1]["content"] if len(start_memory) > 1 else MEMORY_HEADER
            members.append((user_id, call_id, key, memory_message))

        # Each call start reads that member's in-memory index ahead (bot.memory.index), once per call; here a
        # hundred calls start in the same second, so wait for those reads before timing turns, and show their cost.
        await memory.context.indexes.idle()
        loads = memory.context.indexes.load_seconds
        if loads:
            print(
                f"index read ahead at call start ({len(loads)} members, once per call, off the turns): "
                f"p50 {pct(loads, 50) * 1000:.0f} ms   p99 {pct(loads, 99) * 1000:.0f} ms"
            )
        options = {
            "seed": args.seed,
            "rounds": args.rounds,
            "reply_chars": args.reply_chars,
            "stream_seconds": args.stream_seconds,
            "burst": args.burst,
            "proxy_url": f"{web.url}{LLM_ROUTE}",
            "direct_url": f"{upstream_url}/chat/completions",
        }
        agent_conn, agent_end = processes.Pipe()
        agent = processes.Process(target=agent_process, args=(agent_end, members, options), daemon=True)
        agent.start()
        agent_end.close()
        print(f"machine speed check before the levels: {machine_speed():.0f} ms (lower is faster)")
        print()
        heads = ("TTFB p50", "TTFB p99", "TTLB p50", "TTLB p99")
        print(f"{'streams':>7} {'path':<7} {'n':>5} " + " ".join(f"{h:>9}" for h in heads) + "   (ms)")
        verdict = 0
        try:
            try:
                for level in args.levels:
                    added, _cpu = await measure_level(agent_conn, level)
                    target = "  target <= 10 ms: " + ("ok" if added <= 10 else "OVER TARGET") if level == 20 else ""
                    if level == 20 and added > 10:
                        verdict = 1
                    print(f"{level:>7} proxy adds {added:.2f} ms to p99 TTFB{target}")
                if args.tools_level:
                    live.own_words = None
                    _added, without = await measure_level(agent_conn, args.tools_level)
                    live.own_words = own_words
                    _added, offered = await measure_level(agent_conn, args.tools_level)
                    extra = offered - without
                    print(
                        f"{args.tools_level:>7} memory tools offered: CPU per proxied turn {offered:.2f} ms against "
                        f"{without:.2f} ms without ({extra:+.2f} ms)   target <= +1 ms: "
                        + ("ok" if extra <= 1 else "OVER TARGET")
                    )
                    verdict = verdict or int(extra > 1)
                # Before the relay-only pass, which pauses members' memory (a paused member's build reads nothing).
                build_p50, build_p99 = await measure_builds(memory, members, args.builds, rng)
                if args.relay_only_level:
                    # The same level again with the members' memory paused: the route then only relays (no line
                    # stored, no memory built), which separates the relay's cost from the memory work's. Last,
                    # because pausing memory also stops recording the running calls for good (they become
                    # private).
                    level = args.relay_only_level
                    for user_id, *_ in members[:level]:
                        await store.set_memory_enabled(user_id, False, time.time())
                    added, _cpu = await measure_level(agent_conn, level)
                    print(f"{level:>7} of which relaying alone (memory paused): {added:.2f} ms")
            finally:
                agent_conn.send(None)
                await asyncio.to_thread(agent.join, 30)
            await web.stop()
            await live.wait_idle()
            print(f"machine speed check after the levels: {machine_speed():.0f} ms")
            ok = build_p99 <= 5
            verdict = verdict or (0 if ok else 1)
            print()
            print(
                f"per-turn memory build (5,000 turns, 500 facts, {args.builds} runs): p50 {build_p50:.2f} ms   "
                f"p99 {build_p99:.2f} ms   target p99 <= 5 ms: {'ok' if ok else 'OVER TARGET'}"
            )
            stored = await store.count_call_turns(members[0][1])
            print(f"lines stored by the route in member 1's call: {stored} (each proxied turn: user line + reply)")
        finally:  # the store's database threads would otherwise keep this process alive after a failure
            await web.stop()
            await llm.aclose()
            await agora.aclose()
            await store.close()
            upstream_conn.send(None)
            await asyncio.to_thread(upstream.join, 30)
    return verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=100, help="members (one per concurrent stream)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=0,
        help=f"rounds per level (default: about {SAMPLES} turns per path, 80 at one stream)",
    )
    parser.add_argument("--reply-chars", type=int, default=240)
    parser.add_argument(
        "--stream-seconds", type=float, default=0.4, help="how long the upstream takes to stream one reply"
    )
    parser.add_argument(
        "--relay-only-level",
        type=int,
        default=20,
        help="last, run this level again with memory paused (relay cost alone); 0: do not",
    )
    parser.add_argument("--burst", action="store_true", help="all streams of a level start at the same instant")
    parser.add_argument(
        "--tools-level",
        type=int,
        default=20,
        help="run this level without and with the memory tools offered, and compare CPU per turn; 0: do not",
    )
    parser.add_argument("--builds", type=int, default=300, help="runs of the per-turn memory build")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)), help="concurrent streams, comma-separated")
    args = parser.parse_args(argv)
    args.levels = [int(level) for level in args.levels.split(",")]
    most = max(*args.levels, args.tools_level, args.relay_only_level)
    if args.members < most:
        parser.error(f"--members must be at least {most} (one member per concurrent stream)")
    return event_loop.run(run(args))  # the bot's event loop (uvloop), as `python -m bot run` runs it


if __name__ == "__main__":
    raise SystemExit(main())
