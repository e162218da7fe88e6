"""The REST operations the fake implements (``FakeDiscord.handled_routes``): the bot's user and application, the
gateway URL, command sync, interaction callbacks and followups, webhook messages, channel messages, typing and DMs."""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

from standins.discord_gateway.contract_rules import autocomplete_problems, command_problems
from standins.discord_gateway.payloads import command_response
from standins.discord_gateway.protocol import (
    ALLOWED_CALLBACKS,
    AUTOCOMPLETE_RESULT,
    CHANNEL_MESSAGE,
    DEFERRED_CHANNEL_MESSAGE,
    EPHEMERAL,
    LOADING,
    MODAL,
    QUERY_BOOLEAN_LITERALS,
    UPDATE_MESSAGE,
)
from standins.discord_gateway.records import IncomingRequest, Rejection, form_problems, invalid_form_body, unknown


class RestRoutes:
    """One method per implemented operation, each answering ``(status, payload)``."""

    async def _get_me(self, req: IncomingRequest) -> tuple[int, Any]:
        return 200, {**self.bot_user(), "mfa_enabled": False, "locale": "en-US", "verified": True}

    async def _get_application(self, req: IncomingRequest) -> tuple[int, Any]:
        owner = self.user(self.owner_id, "owner")
        team = None
        if self.team_roles is not None:  # Discord names a team-owned application's owner after the team
            owner = {**self.user(self.team_id, f"team{self.team_id}"), "flags": 1024, "public_flags": 1024}
            members = [
                {"user": self.user(user_id), "team_id": self.team_id, "membership_state": 2, "role": role,
                 "permissions": ["*"]}
                for user_id, role in self.team_roles.items()
            ]  # fmt: skip
            team = {"id": self.team_id, "icon": None, "name": "Fake team", "owner_user_id": self.owner_id,
                    "members": members}  # fmt: skip
        return 200, {
            "id": self.application_id,
            "name": self.bot_username,
            "icon": None,
            "description": "",
            "type": None,
            "bot_public": True,
            "bot_require_code_grant": False,
            "verify_key": "0" * 64,
            "flags": 0,
            "flags_new": "0",
            "redirect_uris": [],
            "interactions_endpoint_url": self.interactions_endpoint_url,
            "role_connections_verification_url": None,
            "owner": owner,
            "approximate_guild_count": 1,
            "approximate_user_install_count": 0,
            "approximate_user_authorization_count": 0,
            "explicit_content_filter": 0,
            "team": team,
            "eligible_oauth2_scopes": [],
            "bot": self.bot_user(),
        }

    async def _get_gateway_bot(self, req: IncomingRequest) -> tuple[int, Any]:
        limit = {"total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": 1}
        return 200, {"url": self.gateway_url, "shards": 1, "session_start_limit": limit}

    async def _put_commands(self, req: IncomingRequest) -> tuple[int, Any]:
        self._check_application(req.params["application_id"])
        guild_id = req.params.get("guild_id")
        if guild_id is not None and guild_id != self.guild_id:
            raise unknown("Guild", 10004)
        scope = guild_id or "global"
        body: list[dict[str, Any]] = req.body or []
        if problems := command_problems(body):
            raise form_problems(problems)
        previous = {c["name"]: c for c in self.commands.get(scope, [])}
        stored = []
        for command in body:
            # Keep ids stable across re-syncs of the same name, as Discord does.
            old = previous.get(command["name"])
            stored.append(
                {
                    **copy.deepcopy(command),
                    "id": old["id"] if old else self._snowflake(),
                    "application_id": self.application_id,
                    "version": self._snowflake(),
                    **({"guild_id": guild_id} if guild_id else {}),
                }
            )
        self.commands[scope] = stored
        return 200, [command_response(c) for c in stored]

    async def _post_callback(self, req: IncomingRequest) -> tuple[int, Any]:
        interaction = self._interactions_by_id.get(req.params["interaction_id"])
        if interaction is None or interaction.token != req.params["interaction_token"]:
            raise unknown("interaction", 10062)
        if interaction.acknowledged:
            raise Rejection(400, "Interaction has already been acknowledged.", 40060)
        waited = time.monotonic() - interaction.pushed_at
        if waited > self.first_answer_seconds:
            limit = self.first_answer_seconds
            late = f"the first answer came {waited:.2f} s after the interaction, past Discord's {limit:g} s"
            raise Rejection(404, "Unknown interaction", 10062, problems=[late])
        body: dict[str, Any] = req.body
        callback_type = body["type"]
        if callback_type not in ALLOWED_CALLBACKS.get(interaction.type, frozenset()):
            reason = f"Callback type {callback_type} is invalid for interactions of type {interaction.type}"
            raise invalid_form_body(["type"], "INTERACTION_CALLBACK_TYPE_INVALID", reason)
        if callback_type == AUTOCOMPLETE_RESULT and (problems := autocomplete_problems(body.get("data") or {})):
            raise form_problems(problems)
        interaction.acknowledged = True
        data = body.get("data") or {}
        summary: dict[str, Any] = {"id": interaction.id, "type": interaction.type}
        resource: dict[str, Any] | None = None

        if callback_type in (CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE):
            if callback_type == DEFERRED_CHANNEL_MESSAGE:
                data = {"flags": (data.get("flags") or 0) & EPHEMERAL | LOADING}
            message = self._create_message(
                data, interaction.payload["channel_id"], req.files, interaction=interaction, token=interaction.token
            )
            interaction.original_message_id = message["id"]
            summary |= {
                "response_message_id": message["id"],
                "response_message_loading": callback_type == DEFERRED_CHANNEL_MESSAGE,
                "response_message_ephemeral": bool(message["flags"] & EPHEMERAL),
            }
            # The documented response has a resource (with the message) only for types 4, 7 and 12.
            if callback_type == CHANNEL_MESSAGE:
                resource = {"type": callback_type, "message": message}
        elif callback_type == UPDATE_MESSAGE:
            message = self._edit_message(interaction, interaction.original_message_id, data, req.files)
            summary |= {
                "response_message_id": message["id"],
                "response_message_loading": False,
                "response_message_ephemeral": bool(message["flags"] & EPHEMERAL),
            }
            resource = {"type": callback_type, "message": message}
        elif callback_type == MODAL:
            self.modals[data["custom_id"]] = copy.deepcopy(data)
            self._modal_owner[data["custom_id"]] = (interaction.user_id, interaction)
        # DEFERRED_UPDATE and AUTOCOMPLETE_RESULT change nothing the fake models.

        self._record_response(interaction, "callback", body)
        answer: dict[str, Any] = {"interaction": summary}
        if resource is not None:
            answer["resource"] = resource
        return 200, answer

    async def _post_followup(self, req: IncomingRequest) -> tuple[int, Any]:
        interaction = self._webhook_interaction(req)
        if not interaction.acknowledged:
            raise Rejection(
                404, "Unknown Webhook", 10015, problems=["followup before the interaction was acknowledged"]
            )
        body: dict[str, Any] = req.body or {}
        original = self.messages.get(interaction.original_message_id or "")
        if original is not None and original["flags"] & LOADING:
            # Discord: the first followup after a deferred response edits the loading message, and "the
            # ephemeral flag will be ignored, and the value you provided in the initial defer response will be
            # preserved".
            edit = {k: v for k, v in body.items() if k != "flags"}
            message = self._edit_message(interaction, original["id"], edit, req.files)
        else:
            message = self._create_message(
                body,
                interaction.payload["channel_id"],
                req.files,
                interaction=interaction,
                token=req.params["webhook_token"],
            )
        self._record_response(interaction, "followup", body)
        wait = QUERY_BOOLEAN_LITERALS.get(req.query.get("wait", "false").lower(), False)
        return (200, message) if wait else (204, None)

    async def _get_webhook_message(self, req: IncomingRequest) -> tuple[int, Any]:
        interaction = self._webhook_interaction(req)
        return 200, self.messages[self._webhook_message_id(interaction, req)]

    async def _patch_webhook_message(self, req: IncomingRequest) -> tuple[int, Any]:
        interaction = self._webhook_interaction(req)
        message_id = self._webhook_message_id(interaction, req)
        message = self._edit_message(interaction, message_id, req.body or {}, req.files)
        self._record_response(interaction, "edit", req.body)
        return 200, message

    async def _delete_webhook_message(self, req: IncomingRequest) -> tuple[int, Any]:
        interaction = self._webhook_interaction(req)
        message_id = self._webhook_message_id(interaction, req)
        self.messages.pop(message_id, None)
        self._record_response(interaction, "delete", None)
        return 204, None

    async def _post_channel_message(self, req: IncomingRequest) -> tuple[int, Any]:
        channel_id = req.params["channel_id"]
        if self._bot_cannot_post(channel_id):
            raise Rejection(
                403,
                "Missing Access",
                50001,
                problems=[
                    "a channel message where the app is no member (a user install answers only through the interaction)"
                ],
            )
        if channel_id != self.channel_id and channel_id not in self._dm_channels.values():
            raise unknown("Channel", 10003)
        body: dict[str, Any] = req.body or {}
        if not any(body.get(k) for k in ("content", "embeds", "components", "sticker_ids", "poll")) and not req.files:
            raise Rejection(400, "Cannot send an empty message", 50006)
        message = self._create_message(body, channel_id, req.files)
        self.channel_messages.setdefault(channel_id, []).append(body)
        self._channel_queues.setdefault(channel_id, asyncio.Queue()).put_nowait(body)
        return 200, message

    def _check_channel(self, channel_id: str) -> None:
        if self._bot_cannot_post(channel_id):
            raise Rejection(403, "Missing Access", 50001)
        if channel_id != self.channel_id and channel_id not in self._dm_channels.values():
            raise unknown("Channel", 10003)

    async def _patch_channel_message(self, req: IncomingRequest) -> tuple[int, Any]:
        """Edit a message the bot sent in a channel (how it streams an answer into a DM). Discord lets a bot edit
        only its own messages (403, code 50005)."""
        channel_id, message_id = req.params["channel_id"], req.params["message_id"]
        self._check_channel(channel_id)
        message = self.messages.get(message_id)
        if message is None or message["channel_id"] != channel_id:
            raise unknown("Message", 10008)
        if message["author"]["id"] != self.bot_user_id:
            raise Rejection(403, "Cannot edit a message authored by another user", 50005)
        edited = self._edit_message(None, message_id, req.body or {}, req.files)
        self.channel_message_edits.setdefault(channel_id, []).append(req.body or {})
        return 200, edited

    async def _post_typing(self, req: IncomingRequest) -> tuple[int, Any]:
        """The "typing…" indicator: Discord answers 204 and shows it for about ten seconds."""
        channel_id = req.params["channel_id"]
        self._check_channel(channel_id)
        self.typing.append(channel_id)
        return 204, None

    async def _post_dm_channel(self, req: IncomingRequest) -> tuple[int, Any]:
        recipient = (req.body or {}).get("recipient_id")
        if recipient is None:
            raise invalid_form_body(["recipient_id"], "BASE_TYPE_REQUIRED", "This field is required")
        channel_id = self.dm_channel_id(recipient)
        return 200, {
            "id": channel_id,
            "type": 1,
            "flags": 0,
            "last_message_id": None,
            "recipients": [dict(self.user(recipient))],
        }
