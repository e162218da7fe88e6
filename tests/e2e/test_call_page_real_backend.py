"""The call page in real headless Chromium against the real call service (store, Agora emulator, webhooks)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import expect

from tests.harness import call_world, eventually

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_start_joins_and_end_call_stops_the_call_in_the_store(browser, sdk_stub_url: str, tmp_path: Path) -> None:
    async with call_world(tmp_path, sdk_url=sdk_stub_url) as world:
        await world.store.set_consent(77, True, world.clock())
        started = await world.calls.start(user_id=77, guild_id=5)
        call = await world.store.get_call(started.call_id)
        page = await browser.new_page()
        try:
            await page.goto(started.link_url.replace(world.settings.web.public_url, world.web.url))
            await page.get_by_role("button", name="Start call").click()
            joins = [c for c in await page.evaluate("window.__agoraCalls") if c["name"] == "join"]
            assert joins[0]["args"][1:] and joins[0]["args"][1] == call.channel
            assert joins[0]["args"][3] == call.user_uid
            await page.evaluate("([uid]) => window.__agoraStub.emit('user-published', uid, 'audio')", [call.agent_uid])
            await expect(page.get_by_role("status")).to_have_text("Agent joined — speak any time")

            world.emu.user_joined(call.agent_id)
            world.emu.script(call.agent_id, [("user", "Call me Jo."), ("assistant", "Hi Jo!")])
            await page.get_by_role("button", name="End call").click()
            await expect(page.get_by_role("status")).to_have_text("Call ended")
            await expect(page.locator("#summary-turns")).to_have_text("3")
        finally:
            await page.close()
        ended = await world.store.get_call(started.call_id)
        assert ended.state == "ended" and ended.end_reason == "hangup_page"
        assert [t.content for t in await world.store.call_turns(started.call_id)][1:] == ["Call me Jo.", "Hi Jo!"]
        assert world.emu.agent(call.agent_id).status == "STOPPED"


async def test_closing_the_tab_sends_the_beacon_that_ends_the_call(browser, sdk_stub_url: str, tmp_path: Path) -> None:
    async with call_world(tmp_path, sdk_url=sdk_stub_url) as world:
        await world.store.set_consent(78, True, world.clock())
        started = await world.calls.start(user_id=78, guild_id=5)
        page = await browser.new_page()
        await page.goto(started.link_url.replace(world.settings.web.public_url, world.web.url))
        await page.get_by_role("button", name="Start call").click()
        await expect(page.get_by_role("status")).to_have_text("Waiting for the agent…")
        await page.close(run_before_unload=True)

        async def ended() -> bool:
            return (await world.store.get_call(started.call_id)).state == "ended"

        await eventually(ended)
        assert (await world.store.get_call(started.call_id)).end_reason == "page_closed"
        second = await browser.new_page()
        await second.goto(started.link_url.replace(world.settings.web.public_url, world.web.url))
        await expect(second.get_by_text("This link is no longer valid")).to_be_visible()
        await second.close()


async def test_end_call_works_after_the_link_expired_in_the_browser_that_opened_it(
    browser, sdk_stub_url: str, tmp_path: Path
) -> None:
    async with call_world(tmp_path, sdk_url=sdk_stub_url) as world:
        await world.store.set_consent(78, True, world.clock())
        started = await world.calls.start(user_id=78, guild_id=5)
        call = await world.store.get_call(started.call_id)
        page = await browser.new_page()
        other = await browser.new_page()  # another browser context: no cookie
        try:
            url = started.link_url.replace(world.settings.web.public_url, world.web.url)
            await page.goto(url)
            await page.get_by_role("button", name="Start call").click()
            await page.evaluate("([uid]) => window.__agoraStub.emit('user-published', uid, 'audio')", [call.agent_uid])
            await expect(page.get_by_role("status")).to_have_text("Agent joined — speak any time")
            elsewhere = await other.goto(url)
            assert elsewhere is not None and elsewhere.status == 409
            await expect(other.get_by_role("heading")).to_have_text("This call is already open elsewhere")

            world.clock.advance(world.settings.web.link_ttl_minutes * 60 + 60)
            await page.get_by_role("button", name="End call").click()
            await expect(page.get_by_role("status")).to_have_text("Call ended")
        finally:
            await page.close()
            await other.close()
        assert (await world.store.get_call(started.call_id)).state == "ended"
        assert world.emu.agent(call.agent_id).status == "STOPPED"
