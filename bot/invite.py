"""The OAuth2 links that add the bot: to a server, or to a member's own account (a user install).

Server install: scopes ``bot`` (a member of the server, so it can answer in direct messages and learn when it is
removed) and ``applications.commands`` (its slash commands). Permissions: none. Every answer goes through
interaction responses, which need no channel permission, and direct messages need none either.

User install (``integration_type=1``): scope ``applications.commands`` only; the member then uses the commands in
any server that allows external apps, in their DMs with the app and in group DMs (`bot.places`). Which installs
Discord offers is set in the Developer Portal (Installation Contexts); `discord.user_installs` is the bot's side.
"""

from __future__ import annotations

import discord

INVITE_SCOPES = ("bot", "applications.commands")
INVITE_PERMISSIONS = discord.Permissions.none()
USER_INSTALL_SCOPES = ("applications.commands",)
GUILD_INSTALL, USER_INSTALL = 0, 1
"""Discord's application integration types (``integration_type`` of an install link)."""


def invite_url(application_id: int) -> str:
    """``integration_type=0``: with both installs offered, Discord would otherwise ask which one is meant."""
    link = discord.utils.oauth_url(application_id, permissions=INVITE_PERMISSIONS, scopes=INVITE_SCOPES)
    return f"{link}&integration_type={GUILD_INSTALL}"


def user_install_url(application_id: int) -> str:
    link = discord.utils.oauth_url(application_id, scopes=USER_INSTALL_SCOPES)
    return f"{link}&integration_type={USER_INSTALL}"
