"""/member-data: the bot owner's answer to export and deletion requests that reach them outside a server, from a
member who left every server the bot is in and so cannot run /forget (Red-DiscordBot's `[p]mydata
ownermanagement`). `forget-user` and `export-user` do the same from the shell.

Commands:
    /member-data export member:<user ID>   everything stored about them, as the JSON file /memory's Export gives
    /member-data forget member:<user ID>   everything stored about them, their key included, after a confirmation
                                           saying how much goes

Only the bot's owner may use them: the application's owner, or an admin or developer of the team that owns it, as
Discord reports them (discord.py's ``is_owner``), checked at run time on the command and again on the confirmation.
``default_permissions`` (Administrator) hides the group from other members of a server; it also works in a direct
message with the bot. Every answer is ephemeral, and the log names the owner and the member by ID only."""

from __future__ import annotations

import logging
import re
from typing import Any, Self

import discord
from discord import app_commands
from discord.ext import commands

from bot.client import MemoryBot, NotBotOwner
from bot.i18n import Words
from bot.translator import options, words_of
from cogs._forget_ui import CONFIRM_SECONDS, CancelButton
from cogs._memory_actions import send_export
from cogs._memory_texts import forget_counts
from cogs._owned import OwnedControl, OwnedView, bot_of, owner_of

log = logging.getLogger(__name__)

USER_ID = re.compile(r"[0-9]{15,20}")
"""A Discord user ID (a snowflake) as Developer Mode's **Copy User ID** gives it."""


async def require_bot_owner(interaction: discord.Interaction) -> None:
    if not await bot_of(interaction).is_owner(interaction.user):
        log.info("user %s is not the bot's owner: /member-data refused", interaction.user.id)
        raise NotBotOwner()


def member_id(value: str) -> int | None:
    text = value.strip().removeprefix("<@").removesuffix(">").lstrip("!")
    return int(text) if USER_ID.fullmatch(text) else None


class OwnerData(commands.Cog):
    data = app_commands.Group(
        name="member-data",
        description="Bot owner: export or forget a member's memory by user ID",
        default_permissions=discord.Permissions(administrator=True),
    )

    def __init__(self, bot: MemoryBot):
        self.bot = bot

    async def cog_load(self) -> None:
        self.bot.add_dynamic_items(ConfirmMemberForgetButton)

    async def cog_unload(self) -> None:
        self.bot.remove_dynamic_items(ConfirmMemberForgetButton)

    @data.command(name="export", description="Everything stored about a member, as a file (bot owner only)")
    @options(member="The member's user ID (Developer Mode: right-click them, Copy User ID)")
    async def export(self, interaction: discord.Interaction, member: str) -> None:
        asked = await owner_asks(interaction, member)
        if asked is None:
            return
        words, user_id = asked
        size = await send_export(
            interaction,
            self.bot.services.memory,
            user_id,
            words("owner.export_ready", member=user_id),
            lambda size: words("owner.export_too_large", member=user_id, size=size / 1e6),
        )
        log.info("bot owner %s exported the memory of user %s (%d bytes)", interaction.user.id, user_id, size)

    @data.command(name="forget", description="Forget everything about a member, after a confirmation (bot owner only)")
    @options(member="The member's user ID (Developer Mode: right-click them, Copy User ID)")
    async def forget(self, interaction: discord.Interaction, member: str) -> None:
        asked = await owner_asks(interaction, member)  # first: the question counts what goes
        if asked is None:
            return
        words, user_id = asked
        everything = await self.bot.services.forget_requests.everything(user_id)
        question = words(
            "owner.confirm_forget",
            member=user_id,
            facts=words.count("count.fact", everything.facts),
            conversations=words.count("count.call_or_chat", everything.conversations),
        )
        await ConfirmMemberForgetView(interaction.user.id, user_id, words).send(interaction, question)


async def owner_asks(interaction: discord.Interaction, member: str) -> tuple[Words, int] | None:
    """Acknowledges the command, checks its user is the bot's owner and reads the member's ID: the owner's words and
    the ID, or None once they were told it is not an ID."""
    await interaction.response.defer(ephemeral=True, thinking=True)
    await require_bot_owner(interaction)
    words = words_of(interaction)
    user_id = member_id(member)
    if user_id is None:
        await interaction.followup.send(words("owner.not_an_id", value=member[:40]), ephemeral=True)
    return None if user_id is None else (words, user_id)


class ConfirmMemberForgetView(OwnedView):
    def __init__(self, owner_id: int, member: int, words: Words):
        super().__init__(owner_id, timeout=CONFIRM_SECONDS)
        self.words = words
        self.add_item(ConfirmMemberForgetButton.make(owner_id, member, words))
        self.add_item(CancelButton.make(owner_id, words, row=None))

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(content=self.words("owner.confirm_expired"), view=self)


class ConfirmMemberForgetButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[ConfirmMemberForgetView]],
    template=r"owner:forget:(?P<owner>[0-9]+):(?P<member>[0-9]{15,20})",
):
    """**Forget member**: only the owner who asked may press it, and only while they are still the bot's owner."""

    def __init__(self, button: discord.ui.Button[ConfirmMemberForgetView], owner_id: int, member: int):
        super().__init__(button, owner_id)
        self.member = member

    @classmethod
    def make(cls, owner_id: int, member: int, words: Words) -> Self:
        return cls(
            discord.ui.Button(
                label=words("owner.button.forget"),
                style=discord.ButtonStyle.danger,
                custom_id=f"owner:forget:{owner_id}:{member}",
            ),
            owner_id,
            member,
        )

    @classmethod
    def state_from(cls, match: re.Match[str]) -> dict[str, Any]:
        return {"owner_id": owner_of(match), "member": int(match["member"])}

    async def run(self, interaction: discord.Interaction) -> None:
        view = ConfirmMemberForgetView.live(interaction)
        if view is not None:
            view.stop()
        await interaction.response.defer()
        await require_bot_owner(interaction)
        words = words_of(interaction)
        result = await bot_of(interaction).services.forget_requests.forget_everything(self.member)
        log.info("bot owner %s forgot everything about user %s", interaction.user.id, self.member)
        text = words("owner.forgot", member=self.member, counts=forget_counts(result, words))
        await interaction.edit_original_response(content=text, view=None)


async def setup(bot: MemoryBot) -> None:
    await bot.add_cog(OwnerData(bot))
