"""The OAuth2 link that adds the bot to a server, with exactly what it needs.

Scopes: ``bot`` (a member of the server, so it can answer in direct messages and learn when it is removed)
and ``applications.commands`` (its slash commands). Permissions: none. Every answer goes through
interaction responses, which need no channel permission, and direct messages need none either.
"""

from __future__ import annotations

import discord

INVITE_SCOPES = ("bot", "applications.commands")
INVITE_PERMISSIONS = discord.Permissions.none()


def invite_url(application_id: int) -> str:
    return discord.utils.oauth_url(application_id, permissions=INVITE_PERMISSIONS, scopes=INVITE_SCOPES)
