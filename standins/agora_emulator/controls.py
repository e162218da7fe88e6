"""HTTP test controls for the emulator in another process (``python -m standins.agora_emulator``, the benchmark, the
local demo): the in-process controls (``user_joined``, ``script``, ``user_says``, ...) as loopback routes, the
browser's Agora SDK stand-in, and the standalone ``main``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from standins.agora_emulator.agents import EmulatedAgent
from standins.agora_emulator.emulator import AgoraEmulator
from standins.agora_emulator.fields import ApiError, error_response, json_object_body, json_response

# ---- HTTP test controls and a standalone process ---------------------------------------------------------
#
# The benchmark runs the emulator in another process so that its CPU time and latency stay out of the bot's
# measurements; the test controls it needs (what ``user_joined``/``script``/``agents_by_label`` do in-process)
# are then HTTP routes under ``/_emulator/``. They take no auth (loopback test controls), are never recorded in
# ``requests``/``calls`` (they are not ConvoAI operations) and never tick the clock or consume injected failures.

CONTROL_PREFIX = "/_emulator"
CONTROL_ROUTE_PREFIX = "_emulator."


class ControlledAgoraEmulator(AgoraEmulator):
    """The emulator plus HTTP test controls, served with the ConvoAI API on one loopback port (``port``; 0 picks
    a free one) and on no other:

    * ``POST /_emulator/agents/{agent_id}/user_joined`` → ``{"agent_id", "status", "messages"}``
    * ``POST /_emulator/agents/{agent_id}/script`` with ``{"messages": [[role, content], ...]}`` (all or nothing)
      → ``{"agent_id", "appended", "messages"}``
    * ``GET /_emulator/agents?label=<key>=<value>`` (repeatable, all must match; none: every agent), oldest first
      → ``{"agents": [{"agent_id", "status", "labels"}]}``
    * ``GET /_emulator/stats`` → ``{"requests", "operations": {op: n}, "statuses": {op: {status: n}},
      "agents": {"total", "active"}}``, counting ConvoAI operations only.
    * ``POST /_emulator/agents/{agent_id}/user_says`` with ``{"text": ...}``: :meth:`user_says` (the agent calls its
      custom LLM) → ``{"agent_id", "outcome", "error", "said": [what the agent said after the line]}``

    The member's browser side, for a call page running against the emulator (``python3 tasks.py demo``):

    * ``GET /_emulator/sdk.js``: the Agora Web SDK stand-in (``agora_sdk_stub.js`` followed by
      ``agora_sdk_emulated.js``): joining the channel calls ``user_joined`` below, leaving ``user_left``.
    * ``POST /_emulator/channels/{channel}/user_joined`` → ``{"agent_id", "agent_uid", "said": [the greeting]}``,
      ``POST .../user_left`` → ``{"agent_id"}`` and ``POST .../user_says`` (as above) act on the channel's running
      agent. The page posts a plain-text JSON body (a CORS "simple" request, no preflight); every control answer
      carries ``Access-Control-Allow-Origin: *``: the emulator binds only 127.0.0.1.

    Errors: unknown agent 404 ``AgentNotFound``, agent not STARTING/RUNNING 409 ``AgentNotRunning``, bad body or
    query 400 ``InvalidControl``, in the emulator's ``{"detail", "reason"}`` shape."""

    def __init__(self, *, port: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._listen_port = port

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{CONTROL_PREFIX}"

    def _add_routes(self, app: web.Application) -> None:
        super()._add_routes(app)
        agent = CONTROL_PREFIX + "/agents/{agent_id}"
        name = CONTROL_ROUTE_PREFIX
        app.router.add_post(agent + "/user_joined", self._control_user_joined, name=name + "user_joined")
        app.router.add_post(agent + "/script", self._control_script, name=name + "script")
        app.router.add_get(CONTROL_PREFIX + "/agents", self._control_agents, name=name + "agents")
        app.router.add_get(CONTROL_PREFIX + "/stats", self._control_stats, name=name + "stats")
        app.router.add_post(agent + "/user_says", self._control_user_says, name=name + "user_says")
        app.router.add_get(CONTROL_PREFIX + "/sdk.js", self._control_sdk, name=name + "sdk")
        channel = CONTROL_PREFIX + "/channels/{channel}"
        app.router.add_post(channel + "/user_joined", self._channel_joined, name=name + "channel_joined")
        app.router.add_post(channel + "/user_left", self._channel_left, name=name + "channel_left")
        app.router.add_post(channel + "/user_says", self._control_user_says, name=name + "channel_says")

    @web.middleware
    async def _pipeline(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        if not (request.match_info.route.name or "").startswith(CONTROL_ROUTE_PREFIX):
            return await super()._pipeline(request, handler)
        try:
            response: web.StreamResponse = await handler(request)
        except ApiError as exc:
            response = error_response(exc.status, exc.reason, exc.detail)
        response.headers["Access-Control-Allow-Origin"] = "*"
        return response

    def _control_agent(self, request: web.Request) -> EmulatedAgent:
        if "channel" in request.match_info:
            return self._channel_agent(request)
        agent_id = request.match_info["agent_id"]
        agent = self.agents.get(agent_id)
        if agent is None:
            raise ApiError(404, "AgentNotFound", f"no agent {agent_id!r}")
        if not agent.is_active:
            raise ApiError(409, "AgentNotRunning", f"agent {agent_id} is {agent.status}, not running")
        return agent

    async def _control_user_joined(self, request: web.Request) -> web.Response:
        agent = self._control_agent(request)
        self.user_joined(agent.agent_id)
        return json_response(
            200, {"agent_id": agent.agent_id, "status": agent.status, "messages": len(agent.conversation)}
        )

    async def _control_script(self, request: web.Request) -> web.Response:
        agent = self._control_agent(request)
        try:
            body = await json_object_body(request)
        except ApiError as exc:
            raise ApiError(400, "InvalidControl", exc.detail) from None
        raw = body.get("messages")
        if not isinstance(raw, list):
            raise ApiError(400, "InvalidControl", "messages must be a list of [role, content] pairs")
        messages: list[tuple[str, str]] = []
        for index, item in enumerate(raw):
            if (
                not isinstance(item, list)
                or len(item) != 2
                or item[0] not in ("user", "assistant")
                or not isinstance(item[1], str)
            ):
                raise ApiError(
                    400, "InvalidControl", f"messages[{index}] must be [role, content] with role user or assistant"
                )
            messages.append((item[0], item[1]))
        self.script(agent.agent_id, messages)
        return json_response(
            200, {"agent_id": agent.agent_id, "appended": len(messages), "messages": len(agent.conversation)}
        )

    async def _control_agents(self, request: web.Request) -> web.Response:
        wanted: list[tuple[str, str]] = []
        for raw in request.query.getall("label", []):
            key, sep, value = raw.partition("=")
            if not sep or not key:
                raise ApiError(400, "InvalidControl", f"label must be <key>=<value>, got {raw!r}")
            wanted.append((key, value))
        matches = sorted(
            (agent for agent in self.agents.values() if all(agent.labels.get(k) == v for k, v in wanted)),
            key=lambda agent: agent.sequence,
        )
        return json_response(
            200,
            {
                "agents": [
                    {"agent_id": agent.agent_id, "status": agent.status, "labels": agent.labels} for agent in matches
                ]
            },
        )

    async def _control_stats(self, request: web.Request) -> web.Response:
        operations: dict[str, int] = {}
        statuses: dict[str, dict[str, int]] = {}
        for call in self.calls:
            operations[call.operation] = operations.get(call.operation, 0) + 1
            by_status = statuses.setdefault(call.operation, {})
            by_status[str(call.status)] = by_status.get(str(call.status), 0) + 1
        active = sum(1 for agent in self.agents.values() if agent.is_active)
        return json_response(
            200,
            {
                "requests": len(self.calls),
                "operations": operations,
                "statuses": statuses,
                "agents": {"total": len(self.agents), "active": active},
            },
        )

    def _channel_agent(self, request: web.Request) -> EmulatedAgent:
        channel = request.match_info["channel"]
        running = [agent for agent in self.agents.values() if agent.channel == channel and agent.is_active]
        if not running:
            raise ApiError(404, "AgentNotFound", f"no running agent in channel {channel!r}")
        return max(running, key=lambda agent: agent.sequence)

    async def _control_user_says(self, request: web.Request) -> web.Response:
        agent = self._control_agent(request)
        try:
            text = (await json_object_body(request)).get("text")
        except ApiError as exc:
            raise ApiError(400, "InvalidControl", exc.detail) from None
        if not isinstance(text, str) or not text.strip():
            raise ApiError(400, "InvalidControl", "text must be a non-empty string")
        if not agent.llm.get("url"):
            raise ApiError(409, "NoCustomLLM", f"agent {agent.agent_id} has no llm.url: its LLM is an Agora preset")
        before = len(agent.conversation)
        turn = await self.user_says(agent.agent_id, text.strip())
        said = [m.content for m in agent.conversation[before:] if m.role == "assistant"]
        body = {"agent_id": agent.agent_id, "outcome": turn.outcome, "error": turn.error, "said": said}
        return json_response(200, body)

    async def _channel_joined(self, request: web.Request) -> web.Response:
        agent = self._channel_agent(request)
        before = len(agent.conversation)
        self.user_joined(agent.agent_id)
        said = [m.content for m in agent.conversation[before:] if m.role == "assistant"]
        return json_response(200, {"agent_id": agent.agent_id, "agent_uid": agent.agent_rtc_uid, "said": said})

    async def _channel_left(self, request: web.Request) -> web.Response:
        agent = self._channel_agent(request)
        self.user_left(agent.agent_id)
        return json_response(200, {"agent_id": agent.agent_id})

    async def _control_sdk(self, request: web.Request) -> web.Response:
        here = Path(__file__).parent.parent
        script = "\n".join((here / name).read_text(encoding="utf-8") for name in SDK_PARTS)
        return web.Response(text=script, content_type="text/javascript", charset="utf-8")


SDK_PARTS = ("agora_sdk_stub.js", "agora_sdk_emulated.js")
"""What ``GET /_emulator/sdk.js`` serves, in order: the recording stub, then its link to the emulator."""


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m standins.agora_emulator [--port N] [--max-concurrent N] [--latency S] [--webhook-url URL]``:
    serves the API and the ``/_emulator/`` controls on that one port of 127.0.0.1 until SIGTERM or SIGINT.
    Prints ``agora-emulator ready <base_url>`` on stdout once it listens (``--port 0``, the default, picks a
    free port)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m standins.agora_emulator", description=main.__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-concurrent", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every ConvoAI response")
    parser.add_argument("--webhook-url", default=None)
    args = parser.parse_args(argv)

    async def serve() -> None:
        emulator = ControlledAgoraEmulator(
            port=args.port, max_concurrent=args.max_concurrent, webhook_url=args.webhook_url
        )
        emulator.latency = args.latency
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        async with emulator:
            print(f"agora-emulator ready {emulator.base_url}", flush=True)
            await stop.wait()

    asyncio.run(serve())
    return 0
