"""Three real bot processes share one PostgreSQL database, each running one of three gateway shards and its own
call page port. Thirty calls are spread across them; one process is SIGKILLed mid-call. The other two take its
calls over within one lease period: no line is lost or stored twice, every call is finalized exactly once, and
each member's Discord card is updated once."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import httpx

from bot.store.postgres import PostgresStore
from standins.agora_emulator import (
    TEST_APP_CERTIFICATE,
    TEST_APP_ID,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
    running_emulator,
)
from standins.discord_gateway import FakeDiscord
from standins.harness import eventually, free_port
from tests.e2e.test_smoke_real_entry_point import next_of_kind

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 3
CALLS = 30
MEMBERS = [700_000 + n for n in range(CALLS)]
CHECKPOINT_SECONDS = 0.5  # the lease is three of these


def said(member: int, batch: int) -> list[tuple[str, str]]:
    return [
        ("user", f"member {member} batch {batch}: first thing"),
        ("assistant", f"reply to {member} batch {batch}"),
        ("user", f"member {member} batch {batch}: second thing"),
        ("assistant", f"another reply to {member} batch {batch}"),
    ]


async def test_a_process_killed_mid_call_loses_nothing_and_every_call_ends_once(
    tmp_path: Path, postgres_url: str
) -> None:
    fake = FakeDiscord()
    await fake.start()
    ports = [free_port() for _ in range(PROCESSES)]
    processes: list[asyncio.subprocess.Process] = []
    store = PostgresStore(postgres_url)
    await store.open()
    try:
        async with running_emulator(max_concurrent=CALLS + 5) as emu:
            for member in MEMBERS:  # consent, as the member's earlier /call choice would have stored it
                await store.set_consent(member, True, time.time())
            for shard, port in enumerate(ports):
                processes.append(await spawn(tmp_path, shard, port, emu.base_url, postgres_url, fake))
            await eventually(lambda: len(fake.identify_payloads) >= PROCESSES and "global" in fake.commands, within=60)

            # Discord routes each member's interactions to the shard of their server: here, member n -> shard n % 3.
            cards: dict[int, tuple[str, str]] = {}
            for n, member in enumerate(MEMBERS):
                token = await fake.slash("call", member, shard=n % PROCESSES)
                card = await next_of_kind(fake, token, "followup")
                link = next(c["url"] for row in card["components"] for c in row["components"] if c.get("url"))
                assert link.startswith(f"http://127.0.0.1:{ports[n % PROCESSES]}/call/")
                cards[member] = (token, link.rsplit("/", 1)[1])
            agents = {}
            for member in MEMBERS:
                call = await store.open_call_for_user(member)
                assert call is not None and call.state == "active"
                agents[member] = emu.agent_by_label("call_id", call.call_id).agent_id
                emu.user_joined(agents[member])
                emu.script(agents[member], said(member, 1))
            await eventually(lambda: all_stored(store, 1 + 4), within=30)

            # The second batch is in Agora's history but not yet checkpointed when process 1 dies.
            for member in MEMBERS:
                emu.script(agents[member], said(member, 2))
            processes[1].send_signal(signal.SIGKILL)
            await processes[1].wait()
            killed_at = time.monotonic()
            await eventually(lambda: all_stored(store, 1 + 8), within=30)
            taken_over_within = time.monotonic() - killed_at
            owners = {(await store.open_call_for_user(m)).owner for m in MEMBERS}  # type: ignore[union-attr]
            assert len(owners) == 2, "the two living processes look after every call now"

            # Each member hangs up on the call page, served by whichever living process the proxy picks.
            for member in MEMBERS:
                emu.script(agents[member], [("user", f"member {member}: goodbye")])
            async with httpx.AsyncClient(timeout=30) as http:
                responses = await asyncio.gather(
                    *(
                        http.post(
                            f"http://127.0.0.1:{ports[(0, 2)[n % 2]]}/api/calls/{cards[m][1]}/hangup",
                            content=b"bye",
                            headers={"content-type": "text/plain"},
                        )
                        for n, m in enumerate(MEMBERS)
                    )
                )
            assert [r.status_code for r in responses] == [200] * CALLS

            for member in MEMBERS:
                calls = await store.pool.fetch("SELECT * FROM calls WHERE user_id = $1", member)
                assert len(calls) == 1 and calls[0]["state"] == "ended", member
                turns = await store.call_turns(calls[0]["call_id"])
                greeting = emu.agent(agents[member]).conversation[0].content
                expected = [
                    ("assistant", greeting),
                    *said(member, 1),
                    *said(member, 2),
                    ("user", f"member {member}: goodbye"),
                ]
                assert [(t.role, t.content) for t in turns] == expected, "0 lines lost, 0 stored twice"
                assert emu.agent(agents[member]).status == "STOPPED"

            async def cards_updated() -> bool:
                return all(ended_edits(fake, cards[m][0]) >= 1 for m in MEMBERS)

            await eventually(cards_updated, within=15)
            await asyncio.sleep(0.5)  # a second, duplicate update would arrive by now
            twice = {m: fake.responses[cards[m][0]] for m in MEMBERS if ended_edits(fake, cards[m][0]) != 1}
            assert not twice, f"each card is edited once; these were not: {twice}"
            assert emu.count_calls("leave") == CALLS
            fake.assert_no_invalid_requests()
            print(f"calls of the killed process checkpointed again {taken_over_within:.1f} s after SIGKILL")
    finally:
        for process in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            await asyncio.wait_for(process.wait(), timeout=30)
        await store.close()
        await fake.stop()


async def all_stored(store: PostgresStore, lines: int) -> bool:
    counts = await store.pool.fetch(
        "SELECT c.user_id, COUNT(t.turn_id) AS n FROM calls c LEFT JOIN turns t ON t.call_id = c.call_id "
        "WHERE c.state = 'active' GROUP BY c.user_id"
    )
    return len(counts) == CALLS and all(r["n"] >= lines for r in counts)


def ended_edits(fake: FakeDiscord, token: str) -> int:
    return sum(
        1 for kind, body in fake.responses[token] if kind == "edit" and "Call ended" in (body or {}).get("content", "")
    )


async def spawn(
    tmp_path: Path, shard: int, port: int, agora_url: str, database_url: str, fake: FakeDiscord
) -> asyncio.subprocess.Process:
    config = tmp_path / f"config-{shard}.toml"
    config.write_text(
        f"[discord]\nshard_count = {PROCESSES}\nshard_ids = [{shard}]\ncall_cooldown_seconds = 0\n"
        f'[agora]\napi_base_url = "{agora_url}"\napp_id = "{TEST_APP_ID}"\ncheckpoint_seconds = {CHECKPOINT_SECONDS}\n'
        f"max_concurrent_agents = {CALLS + 5}\n"
        f'[web]\nport = {port}\npublic_url = "http://127.0.0.1:{port}"\n'
        "[calls]\nshutdown_grace_seconds = 1\npage_close_grace_seconds = 0\n"
    )
    env = {
        **os.environ,
        "BOT_CONFIG": str(config),
        "DISCORD_TOKEN": "fake-token",
        "AGORA_APP_CERTIFICATE": TEST_APP_CERTIFICATE,
        "AGORA_CUSTOMER_ID": TEST_CUSTOMER_ID,
        "AGORA_CUSTOMER_SECRET": TEST_CUSTOMER_SECRET,
        "WEB_LINK_SIGNING_KEY": "shared-link-key",  # every process can check every call link
        "MEMORY_DATABASE_URL": database_url,
        "PYTHONUNBUFFERED": "1",
    }
    with (tmp_path / f"bot-{shard}.log").open("ab") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.e2e.bot_process",
            fake.base_url,
            fake.gateway_url,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=out,
        )
