"""Where a user acts in the fake, and what Discord sends from there: the server that added the bot, a server that
never added it (reached through the user's own install), the user's DM with the app, a group DM.

Discord's rules for installs (developer docs: Application Commands, "Installation Context" and "Interaction Contexts";
Receiving and Responding, the interaction object), as the fake applies them:

- A command is offered where an install reaches and the command allows both: ``integration_types`` (0 server install,
  1 user install; unset: the app's installation contexts, set in the Developer Portal: ``installation_contexts``)
  and ``contexts`` (0 server, 1 the app's DM, 2 group DMs and other DMs; unset: all three, or servers only when
  ``dm_permission`` is false).
- Every interaction carries ``context`` and ``authorizing_integration_owners``: key "0" for the server install (the
  server's id, "0" in the app's DM), key "1" for the user install (the installing user's id), each only when that
  install authorized the command; and ``app_permissions``, the app's permissions there (without a bot member in a
  server that never added it, only what an external app's answers may carry).
- The app answers through the interaction alone where it is not a member (a server that never added it, a group DM):
  a channel message there is refused with 403 Missing Access (50001), as Discord refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

Place = Literal["server", "server without the bot", "dm", "group dm"]
PLACES: tuple[Place, ...] = ("server", "server without the bot", "dm", "group dm")
CONTEXT_OF: Mapping[Place, int] = {"server": 0, "server without the bot": 0, "dm": 1, "group dm": 2}
GUILD_INSTALL, USER_INSTALL = "0", "1"

ATTACH_FILES, EMBED_LINKS, MENTION_EVERYONE, USE_EXTERNAL_EMOJIS = 1 << 15, 1 << 14, 1 << 17, 1 << 18
EXTERNAL_APP_PERMISSIONS = str(ATTACH_FILES | EMBED_LINKS | MENTION_EVERYONE)
"""``app_permissions`` where the app has no bot member (a server that never added it, a group DM): what its
interaction answers may carry, and no channel access."""
BOT_DM_PERMISSIONS = str(ATTACH_FILES | EMBED_LINKS | MENTION_EVERYONE | USE_EXTERNAL_EMOJIS)


class NotOffered(LookupError):
    """Discord would not offer the command to this user there (the Discord client has no way to run it)."""


def integration_types(command: Mapping[str, Any] | None, installation_contexts: set[int]) -> list[int]:
    types = (command or {}).get("integration_types")
    return sorted(installation_contexts) if types is None else [int(t) for t in types]


def contexts(command: Mapping[str, Any] | None) -> list[int]:
    allowed = (command or {}).get("contexts")
    if allowed is not None:
        return [int(c) for c in allowed]
    return [0] if (command or {}).get("dm_permission") is False else [0, 1, 2]


def authorizing_owners(
    command: Mapping[str, Any] | None,
    name: str,
    *,
    place: Place,
    user_id: str,
    guild_id: str,
    installation_contexts: set[int],
    user_installed: bool,
    in_server: bool,
) -> dict[str, str]:
    """``authorizing_integration_owners`` for ``/name`` used by ``user_id`` in ``place`` (``guild_id``: the server
    that added the bot; ``in_server``: the user is a member of it); NotOffered where no install reaches it."""
    if CONTEXT_OF[place] not in contexts(command):
        raise NotOffered(f"/{name} is not offered in a {place} (its contexts are {contexts(command)})")
    if place == "server" and not in_server:
        raise NotOffered(f"user {user_id} is not a member of the server that added the bot")
    types = integration_types(command, installation_contexts)
    owners: dict[str, str] = {}
    if 0 in types and in_server and place in ("server", "dm"):
        owners[GUILD_INSTALL] = guild_id if place == "server" else "0"
    if 1 in types and user_installed:
        owners[USER_INSTALL] = user_id
    if not owners:
        raise NotOffered(
            f"/{name} is not offered to user {user_id} in a {place}: no install reaches it there (integration "
            f"types {types}; user install: {user_installed})"
        )
    return owners


class Places:
    """The fake's places beside its one server, and who installed the app to their own account."""

    def _init_places(self) -> None:
        #: A server that never added the bot, and its channel: members reach the app there through their own install.
        self.server_without_bot_id: str = self._snowflake()
        self.server_without_bot_channel_id: str = self._snowflake()
        #: A group DM the bot is not in.
        self.group_dm_id: str = self._snowflake()
        #: Users who added the app to their own account (a user install).
        self.user_installs: set[str] = set()
        #: Users who are not members of the server that added the bot (they reach it only through their install).
        self.outside_server: set[str] = set()
        #: The Developer Portal's Installation Contexts: the installs the app offers (0 server, 1 user; both for a new
        #: app), and what a command without ``integration_types`` is registered for.
        self.installation_contexts: set[int] = {0, 1}

    def install_for_user(self, user_id: int | str, *, member_of_server: bool = True) -> None:
        """``user_id`` adds the app to their account (the ``integration_type=1`` link); ``member_of_server=False``:
        they are not in the server that added the bot, so only their own install reaches them."""
        if 1 not in self.installation_contexts:
            raise NotOffered("the Developer Portal does not offer the user install (installation_contexts)")
        self.user_installs.add(str(user_id))
        if not member_of_server:
            self.outside_server.add(str(user_id))

    def _owners(self, place: Place, user_id: str, command: Mapping[str, Any] | None, name: str) -> dict[str, str]:
        return authorizing_owners(
            command,
            name,
            place=place,
            user_id=user_id,
            guild_id=self.guild_id,
            installation_contexts=self.installation_contexts,
            user_installed=user_id in self.user_installs,
            in_server=user_id not in self.outside_server,
        )

    def _place_fields(
        self, place: Place, user_id: str, permissions: str | int, owners: Mapping[str, str]
    ) -> dict[str, Any]:
        """What an interaction carries about where it happened."""
        fields: dict[str, Any] = {"context": CONTEXT_OF[place], "authorizing_integration_owners": dict(owners)}
        if place in ("server", "server without the bot"):
            external = place == "server without the bot"
            guild_id = self.server_without_bot_id if external else self.guild_id
            channel_id = self.server_without_bot_channel_id if external else self.channel_id
            fields |= {
                "guild_id": guild_id,
                "channel_id": channel_id,
                "channel": self._guild_channel_payload(channel_id, guild_id),
                "member": self.member(user_id, permissions),
                "guild_locale": "en-US",
                "app_permissions": EXTERNAL_APP_PERMISSIONS if external else self.app_permissions,
            }
            if external:
                fields["guild"] = {"id": guild_id, "locale": "en-US", "features": []}
            return fields
        if place == "dm":
            channel = {"id": self.dm_channel_id(user_id), "type": 1, "recipients": [dict(self.user(user_id))]}
            return fields | {
                "channel_id": channel["id"],
                "channel": channel,
                "user": dict(self.user(user_id)),
                "app_permissions": BOT_DM_PERMISSIONS,
            }
        channel = {
            "id": self.group_dm_id,
            "type": 3,
            "name": None,
            "icon": None,
            "owner_id": user_id,
            "recipients": [dict(self.user(user_id))],
        }
        return fields | {
            "channel_id": self.group_dm_id,
            "channel": channel,
            "user": dict(self.user(user_id)),
            "app_permissions": EXTERNAL_APP_PERMISSIONS,
        }

    def _guild_channel_payload(self, channel_id: str, guild_id: str) -> dict[str, Any]:
        return {
            "id": channel_id,
            "type": 0,
            "guild_id": guild_id,
            "name": "general",
            "position": 0,
            "permission_overwrites": [],
        }

    def _bot_cannot_post(self, channel_id: str) -> bool:
        """Channels where the bot is not a member: only interaction answers reach them."""
        return channel_id in (self.server_without_bot_channel_id, self.group_dm_id)
