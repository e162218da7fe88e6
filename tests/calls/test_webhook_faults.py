"""Webhooks under attack and fault: replays after a purge, hostile nesting, a locked database (issue 13)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.agora.webhooks import sign_body
from bot.calls.inbox import WebhookInbox
from bot.keys import generate_master_key_text, parse_master_key
from standins.agora_emulator import TEST_WEBHOOK_SECRET
from standins.harness import CallWorld, call_world, eventually
from tests.calls.test_lifecycle import ALICE, conversation, start_call, stored

DAY = 86400.0


def body_of(envelope: dict[str, Any]) -> bytes:
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode()


async def post_webhook(world: CallWorld, body: bytes) -> httpx.Response:
    headers = {"Content-Type": "application/json", **sign_body(TEST_WEBHOOK_SECRET, body)}
    async with httpx.AsyncClient() as http:
        return await http.post(f"{world.web.url}/agora/webhook", content=body, headers=headers)


async def finished_call_with_history(world: CallWorld) -> tuple[str, dict[str, Any]]:
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, conversation(6, "purged "))
    await world.calls.hang_up(ALICE)
    await world.emu.wait_webhooks_idle()
    history = [e for e in world.emu.delivered if e["eventType"] == 103]
    assert len(history) == 1 and await stored(world, started.call_id)
    return started.call_id, history[0]


async def test_a_genuine_history_webhook_replayed_after_the_retention_purge_restores_nothing(world: CallWorld) -> None:
    call_id, envelope = await finished_call_with_history(world)
    world.clock.advance(8 * DAY)
    assert await world.memory.purge_expired(77, 1, now=world.clock()) > 0
    assert await stored(world, call_id) == []
    await world.store.remember_notice("a-later-notice", world.clock())  # the replay guard forgot old ids

    replay = await post_webhook(world, body_of(envelope))  # the same bytes and signature, 8 days later
    assert replay.status_code == 200
    assert await stored(world, call_id) == []

    fresh = {**envelope, "noticeId": "resent-copy", "notifyMs": int(world.clock() * 1000)}
    assert (await post_webhook(world, body_of(fresh))).status_code == 200
    assert await stored(world, call_id) == [], "history of a purged call is ignored whatever its notice"


async def test_deeply_nested_json_is_never_a_server_error(world: CallWorld) -> None:
    started, _agent = await start_call(world)
    nested = b"[" * 5000
    webhook = await post_webhook(world, nested)
    envelope = b'{"noticeId":"n1","eventType":103,"notifyMs":1,"payload":' + b"[" * 5000 + b"}"
    nested_payload = await post_webhook(world, envelope)
    token = started.link_url.rsplit("/", 1)[1]
    async with httpx.AsyncClient() as http:
        hangup = await http.post(f"{world.web.url}/api/calls/{token}/hangup", content=b"[" * 4000)
    assert webhook.status_code in (200, 400) and nested_payload.status_code in (200, 400)
    assert hangup.status_code in (200, 400)
    assert "internal error" not in hangup.text


async def test_history_webhook_while_the_database_is_locked_is_refused_then_kept_and_stored(tmp_path: Path) -> None:
    async with call_world(tmp_path, busy_timeout_ms=100) as world:
        world.emu.hold_webhooks()
        started, agent = await start_call(world)
        convo = conversation(5, "locked ")
        world.emu.script(agent.agent_id, convo)
        world.emu.fail_next(5, 503, operation="history")  # the hang-up's last read fails: only the webhook has it
        await world.calls.hang_up(ALICE)
        assert await stored(world, started.call_id) == []

        locker = sqlite3.connect(world.settings.memory.database_path)  # a long write elsewhere: locked > timeout
        locker.execute("BEGIN IMMEDIATE")
        try:
            await world.emu.release_webhooks()
        finally:
            locker.rollback()
            locker.close()
        history = [a for a in world.emu.webhook_attempts if a.event_type == 103]
        assert history and {a.status for a in history} == {503}, "never 200 for a notice that was not stored"

        assert await world.calls.drain_inbox() >= 1  # the periodic sweep (or the next start) finishes it
        assert await stored(world, started.call_id) == [("assistant", world.settings.agora.greeting), *convo]
        assert world.calls.inbox.pending() == []


async def history_kept_in_the_inbox(world: CallWorld, convo: list[tuple[str, str]]) -> Any:
    """A call whose transcript only the history webhook carries, delivered (once, no retries) while the database
    is locked: the delivery stays in the inbox. Returns the started call."""
    world.emu.hold_webhooks()
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, convo)
    world.emu.fail_next(5, 503, operation="history")
    await world.calls.hang_up(ALICE)
    locker = sqlite3.connect(world.settings.memory.database_path)
    locker.execute("BEGIN IMMEDIATE")
    try:
        world.emu.webhook_max_retries = 0
        await world.emu.release_webhooks()
    finally:
        locker.rollback()
        locker.close()
    return started


async def test_a_notice_kept_in_the_inbox_is_stored_after_a_restart(tmp_path: Path) -> None:
    async with call_world(tmp_path, busy_timeout_ms=100) as world:
        started = await history_kept_in_the_inbox(world, conversation(3, "restart "))
        assert world.calls.inbox.pending()
        calls = await world.restart()
        await calls.reconcile()
        assert len(await stored(world, started.call_id)) == 4


async def test_lines_spoken_while_the_bot_is_down_arrive_with_agoras_webhook_retries(tmp_path: Path) -> None:
    async with call_world(tmp_path) as world:
        world.emu.webhook_retry_delays = (0.0, 0.5, 1.0)
        started, agent = await start_call(world)
        convo = conversation(10, "downtime ")
        world.emu.script(agent.agent_id, convo[:4])
        await world.calls.checkpoint(started.call_id)
        await world.calls.shutdown(grace_seconds=1)
        await world.web.stop()  # the bot is down
        world.emu.script(agent.agent_id, convo[4:])  # the member keeps talking, then leaves
        world.emu.user_left(agent.agent_id)
        world.emu.advance(world.settings.agora.idle_timeout_seconds + 1)

        await eventually(lambda: len([a for a in world.emu.webhook_attempts if a.status is None]) >= 2, within=5)
        calls = await world.restart()  # back before Agora's retries run out
        await world.web.start()
        await calls.reconcile()  # the agent is gone: the call ends with what the last checkpoint saw
        await world.emu.wait_webhooks_idle()
        call = await world.store.get_call(started.call_id)
        assert call.state == "ended"
        assert await stored(world, started.call_id) == [("assistant", world.settings.agora.greeting), *convo]


async def test_a_restart_saves_the_running_agents_history_window_at_once(world: CallWorld) -> None:
    started, agent = await start_call(world)
    convo = conversation(20, "while down ")
    await world.calls.shutdown(grace_seconds=1)  # the bot goes down; the member keeps talking
    world.emu.script(agent.agent_id, convo)
    calls = await world.restart()
    assert await calls.reconcile() == {"resumed": 1, "finalized": 0, "failed": 0}
    assert await stored(world, started.call_id) == [("assistant", world.settings.agora.greeting), *convo]


async def test_with_member_encryption_a_kept_delivery_holds_no_member_text_on_disk(tmp_path: Path) -> None:
    """The inbox keeps a history notice (the transcript) until it is stored; with a master key it is sealed, and
    after a restart it is opened and stored all the same. A rotated master key opens none of it."""
    master = generate_master_key_text()
    async with call_world(tmp_path, busy_timeout_ms=100, memory={"master_key": master}) as world:
        convo = conversation(3, "Zephyrquill ")
        started = await history_kept_in_the_inbox(world, convo)
        kept = world.calls.inbox.pending()
        assert kept and {p.suffix for p in kept} == {".sealed"}
        folder = kept[0].parent
        on_disk = b"".join(p.read_bytes() for p in folder.iterdir())
        assert b"Zephyrquill" not in on_disk and b"something distinct" not in on_disk
        for path in kept:  # named by a keyed hash: the name does not confirm a guessed body either
            assert path.stem != hashlib.sha256(world.calls.inbox.read(path)).hexdigest()
        assert any(b"Zephyrquill" in world.calls.inbox.read(path) for path in kept), "the transcript was kept"

        rotated = WebhookInbox(folder, master_key=parse_master_key(generate_master_key_text()))
        with pytest.raises(ValueError, match="did not open"):
            rotated.read(kept[0])

        calls = await world.restart()
        await calls.reconcile()
        assert await stored(world, started.call_id) == [("assistant", world.settings.agora.greeting), *convo]
        assert calls.inbox.pending() == []
