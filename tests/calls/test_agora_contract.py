"""What the real Agora service may refuse or report, driven through the call service against the emulator."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from bot.agora.tokens import parse_rtc_token_007, token_expires_at
from bot.agora.webhooks import sign_body
from bot.calls.errors import VoiceUnavailable
from bot.config import AGORA_DEFAULT_TTS_VOICE, ConfigError, load_settings
from standins.agora_emulator import TEST_WEBHOOK_SECRET
from standins.harness import CallWorld, call_world, eventually

ALICE = 1001


async def start_call(world: CallWorld, *, join: bool = True):
    await world.store.set_consent(ALICE, True, world.clock())
    started = await world.calls.start(user_id=ALICE, guild_id=77)
    agent = world.emu.agent_by_label("call_id", started.call_id)
    if join:
        world.emu.user_joined(agent.agent_id)
    return started, agent


async def test_the_default_join_request_has_a_007_agent_token_and_a_minimax_voice(tmp_path: Path) -> None:
    async with call_world(tmp_path) as world:
        started, agent = await start_call(world)
        body = agent.request
        properties = body["properties"]

        assert body["preset"] == "deepgram_nova_3,openai_gpt_4o_mini,minimax_speech_2_6_turbo"
        assert properties["tts"] == {
            "vendor": "minimax",
            "params": {"voice_setting": {"voice_id": AGORA_DEFAULT_TTS_VOICE}},
        }
        assert properties["llm"]["params"] == {"max_tokens": 400, "temperature": 0.7}
        assert properties["asr"] == {"vendor": "deepgram", "language": "en-US", "params": {"language": "en-US"}}
        token = parse_rtc_token_007(properties["token"])
        assert token.services[1].fields == (properties["channel"].encode(), properties["agent_rtc_uid"].encode())
        assert token.services[2].fields == (properties["agent_rtc_uid"].encode(),)
        call = await world.store.get_call(started.call_id)
        assert world.calls.user_token(call).startswith("007")


async def test_the_006_format_stays_available(tmp_path: Path) -> None:
    async with call_world(tmp_path, agora={"token_format": "006"}) as world:
        started, agent = await start_call(world)
        assert agent.request["properties"]["token"].startswith("006")
        assert world.calls.user_token(await world.store.get_call(started.call_id)).startswith("006")


async def test_managed_minimax_with_my_voice_keeps_the_preset(tmp_path: Path) -> None:
    async with call_world(
        tmp_path,
        agora={"tts_vendor": "minimax", "tts_params": {"voice_setting": {"voice_id": "French_FemaleAnchor"}}},
    ) as world:
        _, agent = await start_call(world)
        assert agent.request["preset"].endswith("minimax_speech_2_6_turbo")
        assert agent.request["properties"]["tts"]["params"]["voice_setting"] == {"voice_id": "French_FemaleAnchor"}


async def test_tts_voice_setting_picks_the_managed_voice(tmp_path: Path) -> None:
    async with call_world(tmp_path, agora={"tts_voice": "Italian_BraveHeroine"}) as world:
        _, agent = await start_call(world)
        tts = agent.request["properties"]["tts"]
        assert tts == {"vendor": "minimax", "params": {"voice_setting": {"voice_id": "Italian_BraveHeroine"}}}


async def test_an_own_tts_vendor_replaces_the_preset(tmp_path: Path) -> None:
    own = {"tts_vendor": "microsoft", "tts_params": {"key": "k", "region": "eastus", "voice_name": "en-US-Andrew"}}
    async with call_world(tmp_path, agora=own) as world:
        _, agent = await start_call(world)
        assert "minimax" not in agent.request["preset"]
        assert agent.request["properties"]["tts"]["vendor"] == "microsoft"


async def test_gpt_5_presets_get_no_sampling_params_by_default(tmp_path: Path) -> None:
    async with call_world(
        tmp_path, agora={"preset": "deepgram_nova_3,openai_gpt_5_mini,minimax_speech_2_8_turbo"}
    ) as w:
        _, agent = await start_call(w)
        assert "params" not in agent.request["properties"]["llm"]


async def test_llm_params_setting_is_sent_as_given(tmp_path: Path) -> None:
    async with call_world(tmp_path, agora={"llm_params": {"temperature": 0.3}}) as world:
        _, agent = await start_call(world)
        assert agent.request["properties"]["llm"]["params"] == {"temperature": 0.3}


async def test_the_emulator_refuses_sampling_params_an_admin_forces_on_gpt_5(tmp_path: Path) -> None:
    settings = {"preset": "deepgram_nova_3,openai_gpt_5_nano,minimax_speech_2_8_turbo", "llm_params": {"max_tokens": 5}}
    async with call_world(tmp_path, agora=settings) as world:
        await world.store.set_consent(ALICE, True, world.clock())
        with pytest.raises(VoiceUnavailable):
            await world.calls.start(user_id=ALICE, guild_id=77)


async def test_a_404_from_history_while_the_agent_starts_keeps_the_call(tmp_path: Path) -> None:
    async with call_world(tmp_path, webhooks=False) as world:
        world.emu.start_status = "STARTING"
        started, agent = await start_call(world, join=False)
        assert world.emu.agent(agent.agent_id).status == "STARTING"

        assert await world.calls.checkpoint(started.call_id) is True
        assert (await world.store.get_call(started.call_id)).state == "active"

        world.emu.user_joined(agent.agent_id)
        world.emu.say(agent.agent_id, "user", "hello there")
        assert await world.calls.checkpoint(started.call_id) is True
        assert [t.content for t in await world.store.call_turns(started.call_id)][-1] == "hello there"


async def test_a_404_from_history_after_the_agent_stopped_ends_with_the_wrapped_reason(tmp_path: Path) -> None:
    async with call_world(tmp_path, webhooks=False) as world:
        started, agent = await start_call(world)
        world.emu.user_left(agent.agent_id)
        world.emu.advance(31)

        assert await world.calls.checkpoint(started.call_id) is False
        call = await world.store.get_call(started.call_id)
        assert (call.state, call.end_reason) == ("ended", "idle_timeout")


async def test_a_48_hour_call_starts_and_its_token_is_renewed_on_the_expiry_notice(tmp_path: Path) -> None:
    async with call_world(tmp_path, calls={"max_minutes": 2880}) as world:
        started, agent = await start_call(world)
        first = agent.token
        expiry = token_expires_at(first)
        assert expiry is not None

        world.clock.advance(expiry - world.clock() - 20)
        world.emu.advance(0)
        await eventually(lambda: world.emu.agent(agent.agent_id).token != first)

        renewed = world.emu.agent(agent.agent_id)
        assert renewed.updates == [{"properties": {"token": renewed.token}}]
        assert token_expires_at(renewed.token) > world.clock() + 3600
        assert renewed.status == "RUNNING"
        assert (await world.store.get_call(started.call_id)).state == "active"


async def test_a_checkpoint_renews_the_token_well_before_it_expires(tmp_path: Path) -> None:
    async with call_world(tmp_path, webhooks=False, calls={"max_minutes": 2000}) as world:
        started, agent = await start_call(world)
        expiry = token_expires_at(agent.token)
        assert expiry is not None

        world.clock.advance(expiry - world.clock() - 4000)
        assert await world.calls.checkpoint(started.call_id)
        assert world.emu.agent(agent.agent_id).updates == []

        world.clock.advance(500)
        assert await world.calls.checkpoint(started.call_id)
        assert len(world.emu.agent(agent.agent_id).updates) == 1
        assert token_expires_at(world.emu.agent(agent.agent_id).token) > expiry


async def test_a_notice_from_another_agora_product_is_ignored(tmp_path: Path) -> None:
    async with call_world(tmp_path) as world:
        started, agent = await start_call(world)
        envelope = {
            "noticeId": "rtc-channel-event-1",
            "productId": 1,
            "eventType": 102,
            "notifyMs": 1,
            "payload": {"agent_id": agent.agent_id, "labels": {"call_id": started.call_id}, "message": "OK"},
        }
        body = json.dumps(envelope).encode()
        async with httpx.AsyncClient() as http:
            response = await http.post(
                f"{world.web.url}/agora/webhook", content=body, headers=sign_body(TEST_WEBHOOK_SECRET, body)
            )
        assert response.status_code == 200
        assert (await world.store.get_call(started.call_id)).state == "active"
        assert not await world.store.notice_seen("rtc-channel-event-1")


def test_max_minutes_beyond_agoras_72_hours_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"calls\.max_minutes.*72 hours"):
        load_settings(None, {"CALLS_MAX_MINUTES": "5000", "BOT_CONFIG": str(tmp_path / "none.toml")})
