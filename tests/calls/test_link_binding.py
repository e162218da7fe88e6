"""A call link works in the first browser that opens it (a cookie), and that browser can always end its call
while it is active, also after the link's lifetime (issue 13 item 6, issue 10 item 8)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from bot.agora.tokens import MAX_TOKEN_LIFETIME_SECONDS, token_expires_at
from standins.factories import seed_fact
from standins.harness import CallWorld, call_world
from tests.calls.test_lifecycle import ALICE, link_token, start_call


async def test_the_link_is_bound_to_the_first_browser_that_opens_it(world: CallWorld) -> None:
    started, agent = await start_call(world)
    token = link_token(started)
    async with httpx.AsyncClient(base_url=world.web.url) as first, httpx.AsyncClient(base_url=world.web.url) as other:
        opened = await first.get(f"/call/{token}")
        assert opened.status_code == 200
        cookie = opened.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
        assert (await first.get(f"/call/{token}")).status_code == 200, "a reload in the same browser works"

        elsewhere = await other.get(f"/call/{token}")
        assert elsewhere.status_code == 409
        assert "already open elsewhere" in elsewhere.text and "/hangup" in elsewhere.text
        assert (await other.post(f"/api/calls/{token}/hangup", json={"via": "page"})).status_code == 404
        assert (await other.get(f"/api/calls/{token}/status")).status_code == 404
        assert (await world.store.get_call(started.call_id)).state == "active"

        ended = await first.post(f"/api/calls/{token}/hangup", json={"via": "page"})
        assert ended.status_code == 200 and ended.json()["state"] == "ended"
    assert world.emu.agent(agent.agent_id).status == "STOPPED"


@pytest.mark.parametrize("via", ["page", "beacon"])
async def test_after_the_link_lifetime_the_page_that_opened_the_call_can_still_end_it(
    world: CallWorld, via: str
) -> None:
    started, agent = await start_call(world)
    token = link_token(started)
    async with httpx.AsyncClient(base_url=world.web.url) as page, httpx.AsyncClient(base_url=world.web.url) as other:
        assert (await page.get(f"/call/{token}")).status_code == 200
        world.clock.advance(world.settings.web.link_ttl_minutes * 60 + 60)  # calls outlast their links

        assert (await other.get(f"/call/{token}")).status_code in (404, 409)
        assert (await page.get(f"/api/calls/{token}/status")).json()["state"] == "active"
        body = {"content": b"beacon"} if via == "beacon" else {"json": {"via": "page"}}
        response = await page.post(f"/api/calls/{token}/hangup", **body)
    assert response.status_code == 200 and response.json()["state"] == "ended"
    assert world.emu.agent(agent.agent_id).status == "STOPPED"


async def test_an_expired_link_never_opened_stays_invalid(world: CallWorld) -> None:
    started, _agent = await start_call(world)
    token = link_token(started)
    world.clock.advance(world.settings.web.link_ttl_minutes * 60 + 60)
    async with httpx.AsyncClient(base_url=world.web.url) as browser:
        assert (await browser.get(f"/call/{token}")).status_code == 404
        assert (await browser.post(f"/api/calls/{token}/hangup", json={"via": "page"})).status_code == 404
        assert (await browser.get(f"/api/calls/{token}/status")).status_code == 404


async def test_a_call_longer_than_a_day_gets_a_fresh_token_for_its_page_only(tmp_path: Path) -> None:
    """Agora tokens last at most 24 hours and calls up to 72: the page that opened the call asks for a new one."""
    async with call_world(tmp_path, calls={"max_minutes": 48 * 60}) as world:
        started, _agent = await start_call(world)
        token = link_token(started)
        async with (
            httpx.AsyncClient(base_url=world.web.url) as page,
            httpx.AsyncClient(base_url=world.web.url) as other,
        ):
            assert (await other.post(f"/api/calls/{token}/token")).status_code == 404, "not before the page opened"
            opened = await page.get(f"/call/{token}")
            first = re.search(r'"token":\s*"([^"]+)"', opened.text)
            assert first is not None
            first_expiry = token_expires_at(first.group(1))
            assert first_expiry is not None and first_expiry <= world.clock() + MAX_TOKEN_LIFETIME_SECONDS

            world.clock.advance(23.5 * 3600)
            renewed = await page.post(f"/api/calls/{token}/token")
            assert renewed.status_code == 200
            fresh = renewed.json()["token"]
            assert fresh != first.group(1) and (token_expires_at(fresh) or 0) > first_expiry + 23 * 3600
            assert (await other.post(f"/api/calls/{token}/token")).status_code == 404, "another browser gets none"

            assert (await page.post(f"/api/calls/{token}/hangup", json={"via": "page"})).status_code == 200
            assert (await page.post(f"/api/calls/{token}/token")).status_code == 404, "none for an ended call"


PASSPORT = "Their passport number is X1234567"


async def learned_from(world: CallWorld, call_id: str, text: str) -> None:
    """Post-call processing learned ``text`` from the call (the job is done, so the status reports it)."""
    await seed_fact(world.store, ALICE, text, world.clock(), call_id=call_id)
    job = await world.store.claim_job(world.clock() + 3600, 60)
    assert job is not None and job.ref_id == call_id
    await world.store.finish_job(job.job_id, world.clock())


async def test_a_link_never_opened_tells_nobody_what_was_learned_and_expires_like_its_page(world: CallWorld) -> None:
    """Issue 33 item 5: the member ended the call from Discord without ever opening its link; whoever finds the
    link later (a shared screenshot, the message history) polls the page's status route."""
    started, agent = await start_call(world)
    world.emu.script(agent.agent_id, [("user", "My passport number is X1234567.")])
    await world.calls.hang_up(ALICE)
    await learned_from(world, started.call_id, PASSPORT)
    token = link_token(started)
    async with httpx.AsyncClient(base_url=world.web.url) as finder:
        before = await finder.get(f"/api/calls/{token}/status")
        assert before.status_code == 200
        assert before.json() == {
            "state": "ended",
            "end_reason": "hangup",
            "turns_stored": 2,
            "facts_learned": 1,
            "facts": [],
        }
        asked = await finder.get(f"/api/calls/{token}/status", params={"transcript": "1"})
        assert asked.json() == before.json() and "X1234567" not in asked.text, "nor what was said"
        world.clock.advance(world.settings.web.link_ttl_minutes * 60 + 30 * 86400)
        after = await finder.get(f"/api/calls/{token}/status")
        hangup = await finder.post(f"/api/calls/{token}/hangup", json={"via": "page"})
    assert (after.status_code, after.json()) == (404, {"error": "invalid link"})
    assert hangup.status_code == 404 and "X1234567" not in after.text + hangup.text


async def test_the_browser_that_opened_the_link_sees_what_was_learned_after_the_call_and_the_link_ended(
    world: CallWorld,
) -> None:
    started, agent = await start_call(world)
    token = link_token(started)
    async with httpx.AsyncClient(base_url=world.web.url) as page, httpx.AsyncClient(base_url=world.web.url) as other:
        assert (await page.get(f"/call/{token}")).status_code == 200
        world.emu.script(agent.agent_id, [("user", "My passport number is X1234567.")])
        world.clock.advance(world.settings.web.link_ttl_minutes * 60 + 60)
        assert (await page.post(f"/api/calls/{token}/hangup", json={"via": "page"})).json()["state"] == "ended"
        await learned_from(world, started.call_id, PASSPORT)

        status = await page.get(f"/api/calls/{token}/status")
        said = await page.get(f"/api/calls/{token}/status", params={"transcript": "1"})
        elsewhere = await other.get(f"/api/calls/{token}/status", params={"transcript": "1"})
    assert status.status_code == 200 and status.json()["facts"] == ["Your passport number is X1234567"], (
        "as said to them"
    )
    assert status.json()["facts_learned"] == 1 and "lines" not in status.json()
    assert {"role": "user", "text": "My passport number is X1234567."} in said.json()["lines"]
    assert elsewhere.status_code == 404 and "X1234567" not in elsewhere.text
