"""What a user does in the fake (slash commands, autocomplete, button and select clicks, modal submissions, DMs) the
way the Discord client would, checked against the synced commands, and what the bot answered to each."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping, Sequence
from typing import Any, cast

from standins.discord_gateway.payloads import find_option, modal_submit_rows, option_payload, walk_components
from standins.discord_gateway.places import GUILD_INSTALL, Place
from standins.discord_gateway.protocol import (
    ADMINISTRATOR,
    APPLICATION_COMMAND,
    AUTOCOMPLETE,
    MESSAGE_COMPONENT,
    MODAL_SUBMIT,
)
from standins.discord_gateway.records import Interaction, utc_now_iso


class UserActions:
    """The test-side API of :class:`FakeDiscord`: act as a user, then read the bot's answers."""

    async def slash(
        self,
        name: str,
        user_id: int | str,
        options: Mapping[str, Any] | None = None,
        subcommand: str | None = None,
        permissions: str | int = "0",
        *,
        shard: int = 0,
        place: Place = "server",
    ) -> str:
        """Run ``/name [subcommand] options...`` as ``user_id``; returns the interaction token.

        ``subcommand`` is ``"sub"`` or ``"group sub"``. ``options`` maps option names to values (str, int,
        float, bool). ``permissions`` is the member's resolved permission bits (decimal string or int; Manage
        Server is ``"32"``); a command whose synced ``default_member_permissions`` the member lacks raises
        PermissionError, as Discord would not offer it. ``place``: where the user is (``places.Place``); a
        command no install of theirs reaches there raises ``places.NotOffered``.
        """
        command, scope = self._synced_command(name, user_id, permissions, place)
        data = self._command_data(name, command, scope, options or {}, subcommand, focused=None)
        owners = self._owners(place, str(user_id), command, name)
        return await self._push_interaction(
            APPLICATION_COMMAND, user_id, permissions, data, shard=shard, place=place, owners=owners
        )

    async def autocomplete(
        self,
        name: str,
        user_id: int | str,
        option: str,
        current: str,
        subcommand: str | None = None,
        *,
        options: Mapping[str, Any] | None = None,
        permissions: str | int = "0",
        place: Place = "server",
    ) -> str:
        """Type ``current`` into the autocomplete option ``option``; returns the token (expect callback 8).

        ``options`` are other option values already filled in.
        """
        command, scope = self._synced_command(name, user_id, permissions, place)
        data = self._command_data(name, command, scope, options or {}, subcommand, focused=(option, current))
        owners = self._owners(place, str(user_id), command, name)
        return await self._push_interaction(AUTOCOMPLETE, user_id, permissions, data, place=place, owners=owners)

    async def click(
        self,
        message: Mapping[str, Any] | str | int,
        custom_id: str,
        user_id: int | str,
        *,
        values: Sequence[str] | None = None,
        permissions: str | int = "0",
    ) -> str:
        """Click the button (or pick ``values`` in the string select) ``custom_id`` on a message of the fake.

        ``message`` is a message dict from :attr:`messages` (or its id). Raises LookupError if the message has
        no such enabled component and PermissionError if the message is ephemeral and ``user_id`` is not its
        recipient.
        """
        message_id = str(message if isinstance(message, str | int) else message["id"])
        stored = self.messages.get(message_id)
        if stored is None:
            raise LookupError(f"message {message_id} does not exist in the fake")
        owner = self._visible_to.get(message_id)
        if owner is not None and owner != str(user_id):
            raise PermissionError(f"message {message_id} is ephemeral: only user {owner} can see it")
        component = next((c for c in walk_components(stored["components"]) if c.get("custom_id") == custom_id), None)
        if component is None:
            raise LookupError(f"message {message_id} has no component with custom_id {custom_id!r}")
        if component.get("disabled"):
            raise LookupError(f"component {custom_id!r} is disabled")
        data: dict[str, Any] = {"custom_id": custom_id, "component_type": component["type"]}
        if component["type"] == 3:
            data["values"] = list(values or [])
        elif component["type"] != 2:
            raise NotImplementedError(f"the fake only clicks buttons and string selects, not type {component['type']}")
        place, owners = self._origin_place(message_id)
        return await self._push_interaction(
            MESSAGE_COMPONENT, user_id, permissions, data, message=stored, place=place, owners=owners
        )

    async def submit_modal(
        self, custom_id: str, user_id: int | str, values: Mapping[str, str], *, permissions: str | int = "0"
    ) -> str:
        """Submit the modal ``custom_id`` (opened by the bot for ``user_id``) with ``{input_id: text}``."""
        if custom_id not in self._modal_owner:
            raise LookupError(f"the bot never opened a modal {custom_id!r}; opened: {sorted(self.modals)}")
        owner, opener = self._modal_owner[custom_id]
        if owner != str(user_id):
            raise PermissionError(f"modal {custom_id!r} was shown to user {owner}, not {user_id}")
        remaining = dict(values)
        rows = modal_submit_rows(self.modals[custom_id]["components"], remaining)
        if remaining:
            raise LookupError(f"modal {custom_id!r} has no text inputs {sorted(remaining)}")
        data = {"custom_id": custom_id, "components": rows}
        message = None
        if opener.type == MESSAGE_COMPONENT:
            message = self.messages.get(str(opener.payload["message"]["id"]))
        owners = dict(opener.payload["authorizing_integration_owners"])
        return await self._push_interaction(
            MODAL_SUBMIT, user_id, permissions, data, message=message, place=opener.place, owners=owners
        )

    async def send_dm(self, user_id: int | str, content: str) -> dict[str, Any]:
        """``user_id`` writes ``content`` to the bot in their DM channel (MESSAGE_CREATE); returns it.

        Discord delivers DM content to bots without the privileged message-content intent, so the content is
        always included. Read the bot's answer with :meth:`next_channel_message` on ``message["channel_id"]``.
        """
        channel_id = self.dm_channel_id(user_id)
        message = {
            "id": self._snowflake(),
            "channel_id": channel_id,
            "type": 0,
            "content": content,
            "author": dict(self.user(user_id)),
            "timestamp": utc_now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "components": [],
            "pinned": False,
            "flags": 0,
        }
        self.messages[message["id"]] = message
        await self.dispatch("MESSAGE_CREATE", message)
        return message

    async def next_response(self, token: str, timeout: float = 5.0) -> tuple[str, Any]:  # noqa: ASYNC109
        """The next ``(kind, body)`` the bot sent for the interaction ``token``.

        ``kind`` is ``"callback"``, ``"followup"``, ``"edit"`` or ``"delete"`` (body ``None``); ``body`` is
        the JSON (the ``payload_json`` part for multipart requests; the files are in :attr:`files`). Rejected
        requests are not delivered here -- they are in :attr:`invalid_requests`.
        """
        if token not in self._queues:
            raise KeyError(f"unknown interaction token {token!r}")
        try:
            return await asyncio.wait_for(self._queues[token].get(), timeout)
        except TimeoutError:
            raise TimeoutError(self._silence_report(f"interaction {token}", timeout)) from None

    async def next_channel_message(
        self,
        channel_id: int | str,
        timeout: float = 5.0,  # noqa: ASYNC109 - same shape as next_response
    ) -> dict[str, Any]:
        """The next body the bot POSTed to ``/channels/{channel_id}/messages``."""
        queue = self._channel_queues.setdefault(str(channel_id), asyncio.Queue())
        try:
            return await asyncio.wait_for(queue.get(), timeout)
        except TimeoutError:
            raise TimeoutError(self._silence_report(f"channel {channel_id}", timeout)) from None

    def messages_of(self, token: str) -> list[dict[str, Any]]:
        """The messages the bot created through the interaction ``token`` (its answer and follow-ups), oldest first."""
        interaction = self._interactions_by_token[token]
        return [self.messages[i] for i in sorted(interaction.message_ids, key=int) if i in self.messages]

    def ephemeral_recipient(self, message_id: int | str) -> str | None:
        """The only user who sees an ephemeral message; None for a message everyone in its channel sees."""
        return self._visible_to.get(str(message_id))

    def _silence_report(self, what: str, timeout: float) -> str:
        text = f"the bot sent nothing for {what} within {timeout}s"
        if self.invalid_requests:
            text += "; rejected requests:\n" + "\n".join(r.describe() for r in self.invalid_requests)
        if self.unimplemented_requests:
            text += f"; unimplemented routes hit: {self.unimplemented_requests}"
        return text

    def _synced_command(
        self, name: str, user_id: int | str, permissions: str | int, place: Place = "server"
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The synced chat-input command ``name`` (guild scope first) and its scope; enforces permissions, which
        Discord applies in servers only."""
        for scope in (self.guild_id, "global") if place == "server" else ("global",):
            for command in self.commands.get(scope, []):
                if command["name"] == name and command.get("type", 1) in (1, None):
                    if place in ("server", "server without the bot"):
                        self._check_command_permissions(command, user_id, permissions)
                    return command, scope
        if self.require_synced_commands:
            synced = {scope: [c["name"] for c in cmds] for scope, cmds in self.commands.items()}
            raise LookupError(f"/{name} was never synced (synced: {synced}); call bot.tree.sync() first")
        return None, None

    @staticmethod
    def _check_command_permissions(command: Mapping[str, Any], user_id: int | str, permissions: str | int) -> None:
        required = command.get("default_member_permissions")
        if required is None:
            return
        have, need = int(permissions), int(required)
        if have & ADMINISTRATOR:
            return
        if need == 0 or have & need != need:
            raise PermissionError(
                f"/{command['name']} needs permissions {need} (default_member_permissions); user {user_id} has {have}"
            )

    def _command_data(
        self,
        name: str,
        command: Mapping[str, Any] | None,
        scope: str | None,
        values: Mapping[str, Any],
        subcommand: str | None,
        focused: tuple[str, str] | None,
    ) -> dict[str, Any]:
        path = subcommand.split() if subcommand else []
        definitions = list(command.get("options") or []) if command else None
        wrappers: list[dict[str, Any]] = []
        for depth, part in enumerate(path):
            # Unsynced commands: "group sub" -> group (type 2) then subcommand (type 1).
            part_type = 2 if depth < len(path) - 1 else 1
            if definitions is not None:
                node = next((o for o in definitions if o["name"] == part and o["type"] in (1, 2)), None)
                if node is None:
                    raise LookupError(f"/{name} has no subcommand (group) {part!r}")
                part_type = node["type"]
                definitions = list(node.get("options") or [])
            wrappers.append({"name": part, "type": part_type})
        if definitions is not None and any(o["type"] in (1, 2) for o in definitions):
            raise LookupError(f"/{name} {subcommand or ''}".rstrip() + " needs a subcommand")

        leaf_options = [option_payload(n, v, find_option(definitions, n, name)) for n, v in values.items()]
        if focused is not None:
            option_name, text = focused
            definition = find_option(definitions, option_name, name)
            if definition is not None and not definition.get("autocomplete"):
                raise LookupError(f"option {option_name!r} of /{name} has no autocomplete")
            option_type = definition["type"] if definition else 3
            leaf_options.append({"name": option_name, "type": option_type, "value": text, "focused": True})
        if definitions is not None:
            given = {o["name"] for o in leaf_options}
            missing = [o["name"] for o in definitions if o.get("required") and o["name"] not in given]
            if missing and focused is None:
                raise LookupError(f"/{name}: required options missing: {missing}")

        options: list[dict[str, Any]] = leaf_options
        for wrapper in reversed(wrappers):
            options = [{**wrapper, "options": options}]
        data: dict[str, Any] = {
            "id": command["id"] if command and "id" in command else self._snowflake(),
            "name": name,
            "type": 1,
            "options": options,
        }
        if scope not in (None, "global"):
            data["guild_id"] = scope  # discord.py looks guild commands up with data["guild_id"]
        return data

    async def _push_interaction(
        self,
        interaction_type: int,
        user_id: int | str,
        permissions: str | int,
        data: dict[str, Any],
        message: Mapping[str, Any] | None = None,
        *,
        shard: int = 0,
        place: Place = "server",
        owners: Mapping[str, str] | None = None,
    ) -> str:
        interaction_id = self._snowflake()
        token = f"tok-{interaction_id}"
        if owners is None:
            owners = {GUILD_INSTALL: self.guild_id}
        payload: dict[str, Any] = {
            "id": interaction_id,
            "application_id": self.application_id,
            "token": token,
            "version": 1,
            "type": interaction_type,
            "locale": "en-US",
            "entitlements": [],
            **self._place_fields(place, str(user_id), permissions, owners),
            "attachment_size_limit": 8 * 1024 * 1024,
            "data": data,
        }
        if message is not None:
            payload["message"] = copy.deepcopy(dict(message))
        interaction = Interaction(interaction_id, token, interaction_type, str(user_id), payload, place=place)
        if message is not None:
            interaction.original_message_id = str(message["id"])  # @original of a component interaction
        self._interactions_by_id[interaction_id] = interaction
        self._interactions_by_token[token] = interaction
        self._queues[token] = asyncio.Queue()
        self.responses[token] = []
        self.interactions[token] = payload
        await self.dispatch("INTERACTION_CREATE", payload, shard=shard)
        return token

    def _origin_place(self, message_id: str) -> tuple[Place, dict[str, str]]:
        """A component's interaction comes from where its message was sent, authorized as the interaction that sent
        it was; a message the bot posted itself is in the server's channel or a DM."""
        for origin in self._interactions_by_token.values():
            if message_id == origin.original_message_id or message_id in origin.message_ids:
                return cast(Place, origin.place), dict(origin.payload["authorizing_integration_owners"])
        if self.messages[message_id]["channel_id"] in self._dm_channels.values():
            return "dm", {GUILD_INSTALL: "0"}
        return "server", {GUILD_INSTALL: self.guild_id}

    def _record_response(self, interaction: Interaction, kind: str, body: Any) -> None:
        self.responses[interaction.token].append((kind, body))
        self._queues[interaction.token].put_nowait((kind, body))
