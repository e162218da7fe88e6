"""The call page in real headless Chromium against the real call service (store, Agora emulator, webhooks)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from playwright.async_api import expect

from standins.harness import call_world, eventually

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def ends_with(world, call_id: str, reason: str) -> None:
    """Wait until the call has ended, then check why."""

    async def ended() -> bool:
        return (await world.store.get_call(call_id)).state == "ended"

    await eventually(ended)
    assert (await world.store.get_call(call_id)).end_reason == reason


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

        await ends_with(world, started.call_id, "page_closed")
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


@pytest.mark.parametrize("first", ["reload_get", "beacon"])
async def test_reloading_the_page_keeps_the_call_whichever_request_arrives_first(
    browser, sdk_stub_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """Chromium sends the reloaded page's GET before the old page's close beacon (it unloads the old page only
    once the new one's response arrives); the beacon can also come strictly first (the page is left, then opened
    again). Either order must keep the call, and closing the reopened page must still end it after the grace."""
    async with call_world(tmp_path, sdk_url=sdk_stub_url, calls={"page_close_grace_seconds": 0.5}) as world:
        await world.store.set_consent(79, True, world.clock())
        started = await world.calls.start(user_id=79, guild_id=5)
        url = started.link_url.replace(world.settings.web.public_url, world.web.url)
        page = await browser.new_page()
        await page.goto(url)
        await page.get_by_role("button", name="Start call").click()
        await expect(page.get_by_role("status")).to_have_text("Waiting for the agent…")

        adapter = world.adapter
        open_page, hang_up = adapter.open_page, adapter.hang_up
        reopened, beacon_done = asyncio.Event(), asyncio.Event()

        async def ordered_open_page(token: str, **kwargs: object):
            session = await open_page(token, **kwargs)
            reopened.set()
            return session

        async def ordered_hang_up(token: str, *, via: str, page_id: str | None = None, **kwargs: object):
            if via == "beacon" and first == "reload_get":
                await asyncio.wait_for(reopened.wait(), 10)
            status = await hang_up(token, via=via, page_id=page_id, **kwargs)
            if via == "beacon":
                beacon_done.set()
            return status

        monkeypatch.setattr(adapter, "open_page", ordered_open_page)
        monkeypatch.setattr(adapter, "hang_up", ordered_hang_up)
        if first == "reload_get":
            await page.reload()
        else:
            await page.goto("about:blank")
            await asyncio.wait_for(beacon_done.wait(), 10)
            assert not reopened.is_set()
            await page.goto(url)
        await asyncio.wait_for(beacon_done.wait(), 10)
        assert reopened.is_set()
        await expect(page.get_by_role("button", name="Rejoin")).to_be_enabled()
        await asyncio.sleep(0.8)  # longer than the grace period
        assert (await world.store.get_call(started.call_id)).state == "active"

        await page.get_by_role("button", name="Rejoin").click()
        await expect(page.get_by_role("status")).to_have_text("Waiting for the agent…")
        await page.close(run_before_unload=True)

        await ends_with(world, started.call_id, "page_closed")


async def test_a_reload_mid_call_offers_rejoin_with_the_timer_and_the_transcript_so_far(
    browser, sdk_stub_url: str, tmp_path: Path
) -> None:
    """Pull-to-refresh on a phone: the reloaded page says the call is still running, offers Rejoin, and shows the
    timer from the call's start and what was said so far (the call's stored lines, to this browser only)."""
    async with call_world(tmp_path, sdk_url=sdk_stub_url, calls={"page_close_grace_seconds": 5}) as world:
        await world.store.set_consent(80, True, world.clock())
        started = await world.calls.start(user_id=80, guild_id=5)
        call = await world.store.get_call(started.call_id)
        url = started.link_url.replace(world.settings.web.public_url, world.web.url)
        page = await browser.new_page()
        stranger = await browser.new_page()  # another browser: no cookie
        try:
            await page.goto(url)
            await page.get_by_role("button", name="Start call").click()
            world.emu.user_joined(call.agent_id)
            world.emu.script(call.agent_id, [("user", "Call me Jo."), ("assistant", "Hi Jo!")])
            assert await world.calls.checkpoint(started.call_id)
            world.clock.advance(125)

            await page.reload()
            await expect(page.get_by_role("status")).to_have_text(
                "Your call is still running: press Rejoin to go back in. If you don't rejoin, the call ends about 30 "
                "seconds after the page was reloaded."
            )
            await expect(page.get_by_role("button", name="Rejoin")).to_be_enabled()
            await expect(page.locator("#timer-value")).to_have_text(re.compile(r"^02:0[5-9] of 30:00$"))
            transcript = page.get_by_role("list", name="Transcript")
            await expect(transcript.get_by_role("listitem")).to_have_count(3)
            await expect(transcript).to_contain_text("You:Call me Jo.")
            await expect(transcript).to_contain_text("Agent:Hi Jo!")
            now = await world.store.get_call(started.call_id)
            assert now.state == "active", (now.state, now.end_reason)

            shown = await stranger.request.get(f"{world.web.url}/api/calls/{url.rsplit('/', 1)[1]}/status?transcript=1")
            assert shown.status == 404, "another browser never reads the call's lines"

            await page.get_by_role("button", name="Rejoin").click()
            await page.evaluate("([uid]) => window.__agoraStub.emit('user-published', uid, 'audio')", [call.agent_uid])
            await expect(page.get_by_role("status")).to_have_text("Agent joined — speak any time")
            await page.get_by_role("button", name="End call").click()
            await expect(page.get_by_role("status")).to_have_text("Call ended")
            await expect(page.locator("#summary")).to_contain_text("Lines of the conversation kept")
            await expect(page.get_by_role("heading", name="Transcript", exact=True)).to_be_visible()

            await page.goto(url)  # the old link, in the browser that held the call
            await expect(page.get_by_role("heading", name="This call has ended")).to_be_visible()
        finally:
            await page.close()
            await stranger.close()
        assert (await world.store.get_call(started.call_id)).end_reason == "hangup_page"
        assert [t.content for t in await world.store.call_turns(started.call_id)][1:] == ["Call me Jo.", "Hi Jo!"]


@pytest.mark.parametrize(
    ("lang", "start", "timer", "still_running", "rejoin"),
    [
        (
            "es",
            "Iniciar llamada",
            r"^00:0\d de 30:00$",
            "Tu llamada sigue en curso: pulsa Volver a entrar para regresar. Si no vuelves a entrar, la llamada "
            "termina unos 45 segundos después de recargar la página.",
            "Volver a entrar",
        ),
        (
            "de",
            "Anruf starten",
            r"^00:0\d von 30:00$",
            "Dein Anruf läuft noch: Drück Wieder beitreten, um zurückzukehren. Wenn du nicht wieder beitrittst, endet "
            "der Anruf etwa 45 Sekunden nach dem Neuladen der Seite.",
            "Wieder beitreten",
        ),
    ],
)
async def test_a_spanish_or_german_page_counts_time_and_explains_a_reload_in_its_language(
    browser, sdk_stub_url: str, tmp_path: Path, lang: str, start: str, timer: str, still_running: str, rejoin: str
) -> None:
    """The timer's "of" and what a reloaded page says are the member's words, and the page says how long the call
    waits for them (the agent's idle timeout, ``agora.idle_timeout_seconds``)."""
    async with call_world(
        tmp_path, sdk_url=sdk_stub_url, agora={"idle_timeout_seconds": 45}, calls={"page_close_grace_seconds": 5}
    ) as world:
        await world.store.set_consent(81, True, world.clock())
        started = await world.calls.start(user_id=81, guild_id=5)
        call = await world.store.get_call(started.call_id)
        url = started.link_url.replace(world.settings.web.public_url, world.web.url) + f"?lang={lang}"
        page = await browser.new_page()
        try:
            await page.goto(url)
            await page.get_by_role("button", name=start).click()
            await page.evaluate("([uid]) => window.__agoraStub.emit('user-published', uid, 'audio')", [call.agent_uid])
            await expect(page.locator("#timer-value")).to_have_text(re.compile(timer))

            await page.reload()
            await expect(page.get_by_role("status")).to_have_text(still_running)
            await expect(page.get_by_role("button", name=rejoin)).to_be_enabled()
            await expect(page.locator("#timer-value")).to_have_text(re.compile(timer))
        finally:
            await page.close()
