"""The fake Discord itself: its state (one guild, one channel, users, messages, interactions, what the bot sent),
its lifecycle and ids; the gateway, the user's actions, the REST pipeline and routes and the message store are the
mixins it is made of."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import discord
import yarl
from aiohttp import web

from standins.discord_gateway.contract_rules import FIRST_ANSWER_SECONDS
from standins.discord_gateway.gateway import GatewaySessions
from standins.discord_gateway.interactions import UserActions
from standins.discord_gateway.messages import MessageStore
from standins.discord_gateway.openapi import openapi
from standins.discord_gateway.places import Places
from standins.discord_gateway.protocol import API_PREFIX
from standins.discord_gateway.records import (
    GatewayConnection,
    IncomingRequest,
    Interaction,
    InvalidRequest,
    InvalidResponse,
    UploadedFile,
    utc_now_iso,
)
from standins.discord_gateway.rest_pipeline import RestPipeline
from standins.discord_gateway.rest_routes import RestRoutes

RouteHandler = Callable[[IncomingRequest], Awaitable[tuple[int, Any]]]


class FakeDiscord(GatewaySessions, UserActions, RestPipeline, RestRoutes, MessageStore, Places):
    """Loopback Discord for one bot: REST under ``/api/v10``, gateway at ``/gateway``, one guild that added the bot
    and its channel; besides, for user installs (``places``), a server that never added it and a group DM.

    Typical use (pytest)::

        fake = FakeDiscord(); await fake.start(); fake.patch(monkeypatch)
        ... start the bot with bot.start("fake-token"), wait_until_ready, tree.sync() ...
        token = await fake.slash("call", ALICE)
        kind, body = await fake.next_response(token)
        fake.assert_no_invalid_requests(); await fake.stop()
    """

    def __init__(
        self,
        *,
        require_synced_commands: bool = True,
        validate_responses: bool = True,
        first_answer_seconds: float = FIRST_ANSWER_SECONDS,
    ) -> None:
        """``require_synced_commands``: :meth:`slash` and :meth:`autocomplete` refuse commands the bot never
        synced (real Discord only offers registered commands) and take option types from the synced payload.
        Turn it off only to test a bot that does not sync; option types are then guessed from Python values.
        ``validate_responses``: check the fake's own JSON answers against the documented response schemas.
        ``first_answer_seconds``: how long after an interaction its first answer is taken (Discord's 3 s; later,
        404 ``10062 Unknown interaction``, spec §4.3).
        """
        self.first_answer_seconds = first_answer_seconds
        self.require_synced_commands = require_synced_commands
        self.validate_responses = validate_responses
        self._ids = itertools.count(1_100_000_000_000_000_000)
        self.application_id: str = self._snowflake()
        self.bot_user_id: str = self._snowflake()
        self.guild_id: str = self._snowflake()
        self.channel_id: str = self._snowflake()
        self.owner_id: str = self._snowflake()
        #: When a team owns the application: each member's user id and role ("admin", "developer", "read_only").
        #: None: the user ``owner_id`` owns it.
        self.team_roles: dict[str, str] | None = None
        self.team_id: str = self._snowflake()
        self._init_places()
        self.bot_username = "FakeBot"
        #: Permissions the bot has in the channel, sent as ``app_permissions`` with every interaction.
        self.app_permissions = "0"

        #: Last synced command payload per scope ("global" or the guild id), exactly as the bot sent it.
        self.commands: dict[str, list[dict[str, Any]]] = {}
        #: Every message that exists in the fake, by id (bot messages and users' DMs).
        self.messages: dict[str, dict[str, Any]] = {}
        #: Bodies the bot POSTed to /channels/{id}/messages, per channel id (guild channel and DM channels).
        self.channel_messages: dict[str, list[dict[str, Any]]] = {}
        #: Bodies the bot PATCHed to /channels/{id}/messages/{message id} (its own messages), per channel id.
        self.channel_message_edits: dict[str, list[dict[str, Any]]] = {}
        #: Channel ids the bot showed "typing…" in (POST /channels/{id}/typing), in order.
        self.typing: list[str] = []
        #: Uploaded files, keyed by interaction token (files sent through that interaction) and by message id.
        self.files: dict[str, list[UploadedFile]] = {}
        #: Every ``(kind, body)`` the bot sent per interaction token (what :meth:`next_response` hands out).
        self.responses: dict[str, list[tuple[str, Any]]] = {}
        #: The INTERACTION_CREATE payload pushed for each token.
        self.interactions: dict[str, dict[str, Any]] = {}
        #: Modals the bot opened (callback type 9 ``data``), by modal custom_id.
        self.modals: dict[str, dict[str, Any]] = {}
        #: Requests rejected because the bot got something wrong; must stay empty in a passing test.
        self.invalid_requests: list[InvalidRequest] = []
        #: Requests for routes the fake does not implement (answered 404 -> discord.NotFound): "METHOD path".
        self.unimplemented_requests: list[str] = []
        #: Requests the fake crashed on (bugs of the fake; answered 400 so discord.py does not retry).
        self.internal_errors: list[str] = []
        #: JSON answers of the fake that do not match Discord's response schemas (bugs of the fake).
        self.invalid_responses: list[InvalidResponse] = []
        #: IDENTIFY payloads received over the gateway.
        self.identify_payloads: list[dict[str, Any]] = []
        #: Known users by id (created on first use).
        self.users: dict[str, dict[str, Any]] = {}
        #: Bot tokens Discord refuses (401), as after "Reset Token" in the Developer Portal.
        self.refused_tokens: set[str] = set()
        #: The application's Interactions Endpoint URL (set, Discord sends interactions there, not the gateway).
        self.interactions_endpoint_url: str | None = None

        self._interactions_by_id: dict[str, Interaction] = {}
        self._interactions_by_token: dict[str, Interaction] = {}
        self._queues: dict[str, asyncio.Queue[tuple[str, Any]]] = {}
        self._channel_queues: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self._dm_channels: dict[str, str] = {}  # user id -> DM channel id
        self._visible_to: dict[str, str] = {}  # ephemeral message id -> the only user who sees it
        self._modal_owner: dict[str, tuple[str, Interaction]] = {}  # modal custom_id -> (user id, opener)
        self._gateways: list[GatewayConnection] = []
        self._ready: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._handlers: dict[str, RouteHandler] = {
            "GET /users/@me": self._get_me,
            "GET /oauth2/applications/@me": self._get_application,
            "GET /gateway/bot": self._get_gateway_bot,
            "PUT /applications/{application_id}/commands": self._put_commands,
            "PUT /applications/{application_id}/guilds/{guild_id}/commands": self._put_commands,
            "POST /interactions/{interaction_id}/{interaction_token}/callback": self._post_callback,
            "POST /webhooks/{webhook_id}/{webhook_token}": self._post_followup,
            "GET /webhooks/{webhook_id}/{webhook_token}/messages/@original": self._get_webhook_message,
            "GET /webhooks/{webhook_id}/{webhook_token}/messages/{message_id}": self._get_webhook_message,
            "PATCH /webhooks/{webhook_id}/{webhook_token}/messages/@original": self._patch_webhook_message,
            "PATCH /webhooks/{webhook_id}/{webhook_token}/messages/{message_id}": self._patch_webhook_message,
            "DELETE /webhooks/{webhook_id}/{webhook_token}/messages/@original": self._delete_webhook_message,
            "DELETE /webhooks/{webhook_id}/{webhook_token}/messages/{message_id}": (self._delete_webhook_message),
            "POST /channels/{channel_id}/messages": self._post_channel_message,
            "PATCH /channels/{channel_id}/messages/{message_id}": self._patch_channel_message,
            "POST /channels/{channel_id}/typing": self._post_typing,
            "POST /users/@me/channels": self._post_dm_channel,
        }
        # Routes called with the bot token; webhook and interaction-callback routes carry their own token.
        self._bot_auth_prefixes = ("/users/", "/oauth2/", "/gateway/", "/applications/", "/channels/")

    # ---------------------------------------------------------------------------------------------- lifecycle

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("FakeDiscord is not started")
        return self._port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/api/v10`` (what ``discord.http.Route.BASE`` is patched to)."""
        return f"http://127.0.0.1:{self.port}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    @property
    def handled_routes(self) -> tuple[str, ...]:
        """The operations the fake implements, as ``"METHOD /template"`` (OpenAPI path templates)."""
        return tuple(self._handlers)

    async def start(self) -> None:
        """Bind to 127.0.0.1 on a free port and start serving. Loads the OpenAPI document once per process."""
        openapi()
        self._ready = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/gateway", self._gateway_handler)
        app.router.add_get("/attachments/{message_id}/{attachment_id}/{filename}", self._get_attachment)
        app.router.add_route("*", API_PREFIX + "/{tail:.*}", self._rest_handler)
        app.router.add_route("*", "/{tail:.*}", self._rest_handler)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server  # aiohttp has no public accessor for the bound port
        assert server is not None and server.sockets  # type: ignore[union-attr]
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        """Close gateway connections and shut the server down."""
        for gateway in self._gateways:
            if not gateway.ws.closed:
                await gateway.ws.close()
        self._gateways.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def patch(self, monkeypatch: Any) -> None:
        """Point discord.py at the fake (REST base URL and the default gateway URL)."""
        monkeypatch.setattr(discord.http.Route, "BASE", self.base_url)
        monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(self.gateway_url))

    def assert_no_invalid_requests(self) -> None:
        """Fail with a readable listing if the bot sent anything Discord would have rejected.

        Also fails on :attr:`internal_errors`: a request the fake crashed on was not checked either.
        """
        problems = [r.describe() for r in self.invalid_requests]
        problems += [f"fake discord crashed: {e}" for e in self.internal_errors]
        if problems:
            listing = "\n".join(problems)
            raise AssertionError(f"{len(problems)} rejected or unchecked request(s):\n{listing}")

    # ----------------------------------------------------------------------------------------- ids & payloads

    def _snowflake(self) -> str:
        return str(next(self._ids))

    def user(self, user_id: int | str, username: str | None = None) -> dict[str, Any]:
        """The user object for ``user_id`` (created on first use; ``username`` renames it)."""
        key = str(user_id)
        data = self.users.get(key)
        if data is None:
            data = {
                "id": key,
                "username": username or f"user{key[-4:]}",
                "discriminator": "0",
                "avatar": None,
                "global_name": None,
                "public_flags": 0,
                "flags": 0,
                "primary_guild": None,
            }
            self.users[key] = data
        elif username is not None:
            data["username"] = username
        return data

    def bot_user(self) -> dict[str, Any]:
        data = self.user(self.bot_user_id, self.bot_username)
        data["bot"] = True
        return data

    def member(self, user_id: int | str, permissions: str | int = "0") -> dict[str, Any]:
        return {
            "user": dict(self.user(user_id)),
            "roles": [],
            "joined_at": utc_now_iso(),
            "deaf": False,
            "mute": False,
            "flags": 0,
            "permissions": str(permissions),
        }

    def _channel_payload(self) -> dict[str, Any]:
        return self._guild_channel_payload(self.channel_id, self.guild_id)

    def dm_channel_id(self, user_id: int | str) -> str:
        """The id of the DM channel between the bot and ``user_id`` (also the one the bot opens itself)."""
        key = str(user_id)
        if key not in self._dm_channels:
            self._dm_channels[key] = self._snowflake()
            self.user(key)
        return self._dm_channels[key]


async def run_until_ready(client: discord.Client) -> asyncio.Task[None]:
    """Start ``client`` on the fake (``client.start``, as the bot starts) and wait until it is ready; returns the
    running task. Raises why start-up failed, or TimeoutError after 10 s."""
    task = asyncio.create_task(client.start("fake-token"))
    ready = asyncio.create_task(client.wait_until_ready())
    done, _ = await asyncio.wait({task, ready}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    if ready not in done:
        ready.cancel()
        if task.done():
            task.result()  # re-raises why startup failed
        task.cancel()
        raise TimeoutError("the bot did not become ready on the fake Discord")
    return task


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m standins.discord_gateway``: serves the fake on a free port of 127.0.0.1 until SIGTERM or
    SIGINT and prints where (``fake-discord ready <REST base URL> <gateway URL>``), the two addresses discord.py is
    pointed at (``discord.http.Route.BASE`` and ``DiscordWebSocket.DEFAULT_GATEWAY``, see ``FakeDiscord.patch``)."""
    import argparse
    import signal

    argparse.ArgumentParser(prog="python -m standins.discord_gateway", description=main.__doc__).parse_args(argv)

    async def serve() -> None:
        fake = FakeDiscord()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await fake.start()
        try:
            print(f"fake-discord ready {fake.base_url} {fake.gateway_url}", flush=True)
            await stop.wait()
        finally:
            await fake.stop()

    asyncio.run(serve())
    return 0
