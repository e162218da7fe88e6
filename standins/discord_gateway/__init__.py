"""A loopback fake of Discord (REST API v10 + gateway) for wire-level smoke tests of a discord.py bot.

See ``/work/shared/specs/discord-testing.md`` §1.5 for what the fake must implement. In short: an aiohttp
server on 127.0.0.1 answers the handful of REST routes a slash-command bot uses and speaks just enough of the
gateway protocol (HELLO, heartbeat ACK, IDENTIFY -> READY + GUILD_CREATE) for ``bot.start(token)`` to reach
``on_ready``. Test code then pushes interactions (:meth:`FakeDiscord.slash`, :meth:`FakeDiscord.click`, ...)
and reads what the bot answered (:meth:`FakeDiscord.next_response`).

OpenAPI validation
------------------
Every request body the bot sends (JSON, or the ``payload_json`` part of a multipart request) and every
declared path and query parameter is validated against Discord's own OpenAPI 3.1 description
(``standins/discord_openapi.json``, a copy of discord/discord-api-spec commit 74fda0fad044, MIT, see
``DISCORD_OPENAPI_LICENSE``). An invalid request is answered like Discord does -- HTTP 400, ``{"message":
"Invalid Form Body", "code": 50035, "errors": {...}}`` -- so the bot raises :class:`discord.HTTPException`,
and it is recorded in :attr:`FakeDiscord.invalid_requests`; call
:meth:`FakeDiscord.assert_no_invalid_requests` at teardown. Where discord.py 2.7.1's real payloads disagree
with the published schema, the schema is widened by an explicit, documented entry in :data:`SCHEMA_ALLOWANCES`
(an allowance only ever *adds* an accepted alternative, it never drops a rule). The fake's own JSON answers
are validated against the documented response schemas too; mismatches (bugs of the fake, not of the bot) land
in :attr:`FakeDiscord.invalid_responses`.

The document is parsed once per process and validators are built lazily per schema location and cached
(:func:`openapi`), so a test pays roughly 60 ms once and microseconds afterwards.

Known gaps (why this fake is for smoke tests only, spec §1.5.6): one guild that added the bot (with one text
channel; besides it, for user installs, one server that never added the bot and one group DM), no roles or
channel overwrites, no rate limits, no resume/reconnect, no token expiry, unknown JSON fields are accepted
(the published schemas do not forbid additional properties). Rules it *does* enforce beyond the schema:
commands must be synced before a user can run them, ``default_member_permissions`` gates invocation, ephemeral
messages can only be clicked by their recipient, an interaction can be acknowledged once, followups need an
acknowledged interaction, the first followup after a deferred response edits the loading message and keeps its
ephemeral flag (as Discord documents), modals can only be submitted by the user they were shown to,
bot-authenticated routes need an ``Authorization: Bot ...`` header, and user installs as Discord documents them
(``places``: a command is offered only where an install reaches and its ``integration_types`` and ``contexts``
allow, interactions carry ``context``, ``authorizing_integration_owners`` and ``app_permissions`` per place, and the
app cannot post a channel message where it is no member).

The package: ``protocol`` (Discord's numbers), ``openapi`` and ``schema_errors`` (the schema checks and Discord's
error shape), ``records`` (what is recorded and passed around), ``payloads`` (payload shapes), ``gateway`` (the
websocket), ``interactions`` (what a user does), ``places`` (where they do it, and user installs), ``rest_pipeline``
and ``rest_routes`` (the REST API), ``messages`` (the message store) and ``fake`` (:class:`FakeDiscord`, made of
those, ``run_until_ready`` and ``python -m standins.discord_gateway``).
"""

from standins.discord_gateway.fake import FakeDiscord, main, run_until_ready
from standins.discord_gateway.openapi import OPENAPI_FILE, SCHEMA_ALLOWANCES, OpenAPI, SchemaAllowance, openapi
from standins.discord_gateway.protocol import (
    CHANNEL_MESSAGE,
    DEFERRED_CHANNEL_MESSAGE,
    DEFERRED_UPDATE,
    EPHEMERAL,
    LOADING,
    MODAL,
    QUERY_BOOLEAN_LITERALS,
    UPDATE_MESSAGE,
)
from standins.discord_gateway.records import InvalidRequest, InvalidResponse, UploadedFile

__all__ = [
    "CHANNEL_MESSAGE",
    "DEFERRED_CHANNEL_MESSAGE",
    "DEFERRED_UPDATE",
    "EPHEMERAL",
    "LOADING",
    "MODAL",
    "OPENAPI_FILE",
    "QUERY_BOOLEAN_LITERALS",
    "SCHEMA_ALLOWANCES",
    "UPDATE_MESSAGE",
    "FakeDiscord",
    "InvalidRequest",
    "InvalidResponse",
    "OpenAPI",
    "SchemaAllowance",
    "UploadedFile",
    "main",
    "openapi",
    "run_until_ready",
]
