"""Where a member used a command, and what that place allows.

A member reaches the bot through a server that added it (a guild install) or through their own account (a user
install): in any server that allows external apps, in their DMs with the app and in group DMs. Discord says which
with every interaction (`context`, and `authorizing_integration_owners`: key 0 the server that installed the app,
key 1 the member who installed it to their account); the Discord side (`bot.client.place_of`) reads those and this
module decides. No Discord types here.

- A server that added the bot keeps its `/settings` (calls off, limits, persona, retention) for every member there,
  also for one who uses their own install: Discord then names both owners.
- A server that never added the bot has no settings (the member's per-day limit and the bot owner's caps apply, as in
  DMs), and the bot is not a member there: nothing is posted for others to see, every answer is the member's own.
- A group DM (or a DM between members) is reached only through a user install: the same holds there.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Where(StrEnum):
    SERVER = "server"
    """A server that added the bot."""
    SERVER_WITHOUT_BOT = "server without the bot"
    """A server that never added it, reached through the member's own install."""
    BOT_DM = "bot dm"
    """The member's DM with the bot."""
    PRIVATE_CHANNEL = "private channel"
    """A group DM, or a DM between members: only a user install reaches it."""


@dataclass(frozen=True)
class Place:
    where: Where
    guild_id: int | None
    """The server the command was used in, whether or not it added the bot."""

    @property
    def settings_guild(self) -> int | None:
        """The server whose settings and per-server limits apply: only one that added the bot."""
        return self.guild_id if self.where is Where.SERVER else None

    @property
    def can_post(self) -> bool:
        """Whether an answer may be shown to others there: only where the bot was added, or in its own DM (where
        only the member reads it anyway)."""
        return self.where in (Where.SERVER, Where.BOT_DM)

    @property
    def only_through_user_install(self) -> bool:
        """Places the bot reaches only because the member installed it to their account."""
        return self.where in (Where.SERVER_WITHOUT_BOT, Where.PRIVATE_CHANNEL)


class ServerWithoutBot(Exception):
    """A server command (`/settings`) used where the server never added the bot: it has no settings there."""


def place_of(*, guild_id: int | None, private_channel: bool, server_installed: bool, user_installed: bool) -> Place:
    """``private_channel``: Discord's interaction context 2 (a group DM or a DM between members);
    ``server_installed``: Discord named this server as an owner of the interaction (key 0 of
    `authorizing_integration_owners`); ``user_installed``: it named the member (key 1). An interaction in a server
    that carries no user-install owner came through the server's install, whatever else it lacks."""
    if guild_id is not None:
        added = server_installed or not user_installed
        return Place(Where.SERVER if added else Where.SERVER_WITHOUT_BOT, guild_id)
    if private_channel:
        return Place(Where.PRIVATE_CHANNEL, None)
    return Place(Where.BOT_DM, None)


def refused_place(place: Place, *, user_installs_offered: bool) -> bool:
    """With user installs switched off (`discord.user_installs = false`), the bot answers nothing in places only a
    user install reaches, even when Discord still offers commands registered before the switch."""
    return place.only_through_user_install and not user_installs_offered
