"""The gateway websocket: HELLO, heartbeat ACK, IDENTIFY answered with READY and GUILD_CREATE (per shard), member
chunks, and DISPATCH events pushed to the bot's connection of a shard."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import WSMsgType, web

from standins.discord_gateway.records import GatewayConnection, utc_now_iso

log = logging.getLogger(__name__)


class GatewaySessions:
    """The fake's gateway side: the bot's connections and the events sent on them."""

    async def _gateway_handler(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        gateway = GatewayConnection(ws)
        self._gateways.append(gateway)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}}))
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                continue
            frame = json.loads(message.data)
            op, data = frame.get("op"), frame.get("d")
            if op == 1:  # HEARTBEAT
                await ws.send_str(json.dumps({"op": 11}))
            elif op == 2:  # IDENTIFY
                await self._identify(gateway, data)
            elif op == 8:  # REQUEST_GUILD_MEMBERS: the fake guild has no members worth chunking
                chunk = {"guild_id": self.guild_id, "members": [], "chunk_index": 0, "chunk_count": 1}
                if data.get("nonce") is not None:
                    chunk["nonce"] = data["nonce"]
                await self._send_dispatch(gateway, "GUILD_MEMBERS_CHUNK", chunk)
            else:
                log.debug("fake gateway ignores op %s", op)
        if gateway in self._gateways:
            self._gateways.remove(gateway)
        return ws

    async def _identify(self, gateway: GatewayConnection, data: dict[str, Any]) -> None:
        self.identify_payloads.append(data)
        gateway.shard = data.get("shard")
        ready: dict[str, Any] = {
            "v": 10,
            "user": self.bot_user(),
            "guilds": [{"id": self.guild_id, "unavailable": True}],
            "session_id": "fake",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": self.application_id, "flags": 0},
        }
        if gateway.shard is not None:
            ready["shard"] = gateway.shard  # AutoShardedConnectionState.parse_ready reads data["shard"][0]
        await self._send_dispatch(gateway, "READY", ready)
        if gateway.shard is None or gateway.shard[0] == 0:
            await self._send_dispatch(gateway, "GUILD_CREATE", self._guild_payload())
        gateway.identified = True
        assert self._ready is not None
        self._ready.set()

    def _guild_payload(self) -> dict[str, Any]:
        everyone = {
            "id": self.guild_id,
            "name": "@everyone",
            "permissions": "0",
            "position": 0,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }
        return {
            "id": self.guild_id,
            "name": "Test Guild",
            "owner_id": self.owner_id,
            "features": [],
            "emojis": [],
            "stickers": [],
            "members": [self.member(self.bot_user_id)],  # real Discord always includes the bot's own member
            "threads": [],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "roles": [everyone],
            "channels": [{k: v for k, v in self._channel_payload().items() if k != "guild_id"}],
            "member_count": 2,
            "unavailable": False,
            "large": False,
            "joined_at": utc_now_iso(),
        }

    async def _send_dispatch(self, gateway: GatewayConnection, event: str, data: dict[str, Any]) -> None:
        gateway.sequence += 1
        await gateway.ws.send_str(json.dumps({"op": 0, "d": data, "s": gateway.sequence, "t": event}))

    async def wait_until_ready(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109 - API of spec §1.5.4
        """Wait until READY and GUILD_CREATE were sent to a bot."""
        if self._ready is None:
            raise RuntimeError("FakeDiscord is not started")
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            raise TimeoutError(f"no bot identified on the fake gateway within {timeout}s") from None

    async def dispatch(self, event: str, data: dict[str, Any], *, shard: int = 0) -> None:
        """Send any gateway DISPATCH event to the bot connection of `shard` (an unsharded bot is shard 0); for
        events without a helper. Discord routes a guild's events to the shard that guild belongs to."""
        await self.wait_until_ready()
        for gateway in self._gateways:
            number = 0 if gateway.shard is None else gateway.shard[0]
            if gateway.identified and not gateway.ws.closed and number == shard:
                await self._send_dispatch(gateway, event, data)
                return
        raise RuntimeError(f"no bot connected to the fake gateway runs shard {shard}")
