"""/call and /hangup: start a voice call, hand over the link, end it from Discord."""

from __future__ import annotations

import logging
import time

import discord
from discord import app_commands
from discord.ext import commands

from bot import messages
from bot.calls.service import CallEnded, CallService, StartedCall
from bot.client import FunnelledView, MemoryBot
from cogs._consent import MemoryChoiceView

log = logging.getLogger(__name__)

CONSENT_TEXT = (
    "**Before your first call: may the agent remember you?**\n"
    "If you choose **Remember me**, what you say in calls and chats with this bot is kept under your Discord "
    "account, so the agent can greet you by name and pick up where you left off, in any server.\n"
    "• `/memory` shows exactly what is remembered, with dates, and exports it.\n"
    "• `/forget` deletes one thing, one call, or everything — for real.\n"
    "• `/call private:True` talks without memory; you can pause memory any time.\n"
    "Nothing is shared with server admins or other members."
)
CONSENT_VIEW_SECONDS = 5 * 60
CONSENT_EXPIRED = "You didn't choose, so no call was started and nothing was stored. Type `/call` again any time."
CARD_VIEW_SECONDS = 14 * 60
"""Ephemeral messages can be edited only while the interaction token lives (15 minutes)."""


def _cooldown(interaction: discord.Interaction[MemoryBot]) -> app_commands.Cooldown | None:
    seconds = interaction.client.settings.discord.call_cooldown_seconds
    return app_commands.Cooldown(1, seconds) if seconds > 0 else None


def card_text(started: StartedCall) -> str:
    memory = (
        "This call is **private**: nothing is read from or written to your memory."
        if started.private
        else "The agent remembers your earlier conversations; this call will be remembered too."
    )
    return (
        "**Your call is ready.** Open the link, click **Start call** and allow the microphone.\n"
        f"{memory}\nThe link is only for you and works once; calls last up to {started.max_minutes} minutes."
    )


def ended_text(ended: CallEnded, facts_learned: int | None = None, *, learning: bool = True) -> str:
    if ended.private:
        return "**Call ended.** It was private, so nothing was remembered."
    lines = f"{ended.turns_stored} line{'s' if ended.turns_stored != 1 else ''}"
    if not learning:
        learned = "See them any time with `/memory`."
    elif facts_learned is None:
        learned = "What the agent learned will appear in `/memory` shortly."
    else:
        learned = f"The agent learned {facts_learned} new thing{'s' if facts_learned != 1 else ''} about you."
    return f"**Call ended.** {lines} of the conversation were kept. {learned}"


class CardView(FunnelledView):
    def __init__(self, cog: Calls, started: StartedCall):
        super().__init__(timeout=CARD_VIEW_SECONDS)
        self.cog = cog
        self.call_id = started.call_id
        hang_up = self.hang_up
        self.remove_item(hang_up)
        self.add_item(discord.ui.Button(label="Open call page", url=started.link_url, emoji="📞"))
        self.add_item(hang_up)

    @discord.ui.button(label="Hang up", style=discord.ButtonStyle.danger, custom_id="call:hangup")
    async def hang_up(self, interaction: discord.Interaction, button: discord.ui.Button[CardView]) -> None:
        await interaction.response.defer()
        ended = await self.cog.calls.finalize(self.call_id, "hangup_button")
        if ended is None:
            await interaction.edit_original_response(content="This call has already ended.", view=None)
        self.stop()


class Calls(commands.Cog):
    def __init__(self, bot: MemoryBot):
        self.bot = bot
        self.cards: dict[str, tuple[discord.Interaction, CallEnded | None]] = {}

    @property
    def calls(self) -> CallService:
        """The call service; commands check `services.calls` for None (Agora not configured) first."""
        calls = self.bot.services.calls
        if calls is None:
            raise RuntimeError("the call service is not running: agora.* settings are not configured")
        return calls

    @property
    def learning(self) -> bool:
        """Facts are learned after a call only when an LLM is configured."""
        return self.bot.services.llm is not None

    async def cog_load(self) -> None:
        if self.bot.services.calls is not None:
            self.calls.add_listener(self)
        self.bot.services.processed_listeners.append(self.call_processed)

    @app_commands.command(name="call", description="Start a voice call with the agent that remembers you")
    @app_commands.describe(private="Talk without the agent reading or writing your memory")
    @app_commands.checks.dynamic_cooldown(_cooldown, key=lambda i: i.user.id)
    async def call(self, interaction: discord.Interaction, private: bool = False) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        if self.bot.services.calls is None:
            await interaction.followup.send(messages.CALLS_NOT_CONFIGURED, ephemeral=True)
            return
        user = await self.bot.services.store.get_user(interaction.user.id)
        if not private and (user is None or user.consent is None):
            view = MemoryChoiceView(
                interaction.user.id,
                lambda choice, remember: self.choose(choice, remember=remember),
                decline_label="Call without memory",
                expired_text=CONSENT_EXPIRED,
                timeout=CONSENT_VIEW_SECONDS,
            )
            view.message = await interaction.followup.send(CONSENT_TEXT, view=view, ephemeral=True, wait=True)
            return
        await self.start_and_show(interaction, private=private)

    async def choose(self, interaction: discord.Interaction, *, remember: bool) -> None:
        await interaction.response.edit_message(content="Starting your call…", view=None)
        await self.bot.services.store.set_consent(interaction.user.id, remember, time.time())
        await self.start_and_show(interaction, private=not remember, edit=True)

    async def start_and_show(self, interaction: discord.Interaction, *, private: bool, edit: bool = False) -> None:
        started = await self.calls.start(user_id=interaction.user.id, guild_id=interaction.guild_id, private=private)
        view = CardView(self, started)
        message: discord.Message
        if edit:
            message = await interaction.edit_original_response(content=card_text(started), view=view)
        else:
            message = await interaction.followup.send(card_text(started), view=view, ephemeral=True, wait=True)
        self._forget_expired_cards()
        self.cards[started.call_id] = (interaction, None)
        await self.calls.remember_card(started.call_id, interaction.token, message.id)

    @app_commands.command(name="hangup", description="End your voice call")
    async def hangup(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        if self.bot.services.calls is None:
            await interaction.followup.send(messages.CALLS_NOT_CONFIGURED, ephemeral=True)
            return
        ended = await self.calls.hang_up(interaction.user.id)
        await interaction.followup.send(ended_text(ended, learning=self.learning), ephemeral=True)

    async def call_ended(self, ended: CallEnded) -> None:
        card = self.cards.get(ended.call_id)
        if card is None:
            await self._edit_card_elsewhere(ended)
            return
        self.cards[ended.call_id] = (card[0], ended)
        await self._edit_card(card[0], ended_text(ended, learning=self.learning))
        if ended.private or ended.turns_stored == 0 or not self.learning:
            self.cards.pop(ended.call_id, None)

    async def call_processed(self, kind: str, ref_id: str, facts_learned: int) -> None:
        card = self.cards.pop(ref_id, None)
        if kind != "post_call" or card is None or card[1] is None:
            return
        await self._edit_card(card[0], ended_text(card[1], facts_learned))

    def _forget_expired_cards(self) -> None:
        """Discord lets a card be edited for 15 minutes; older ones are dropped so the map stays small."""
        for call_id, (interaction, _ended) in list(self.cards.items()):
            if interaction.is_expired():
                del self.cards[call_id]

    async def _edit_card_elsewhere(self, ended: CallEnded) -> None:
        """The call was shown by another bot process (or before a restart): edit its card through the token."""
        if ended.card is None or self.bot.application_id is None:
            return
        token, message_id = ended.card
        webhook = discord.Webhook.partial(self.bot.application_id, token, client=self.bot)
        try:
            await webhook.edit_message(message_id, content=ended_text(ended, learning=False), view=None)
        except discord.HTTPException as exc:
            log.info("could not edit a call card (Discord no longer allows it): %s", exc.status)

    @staticmethod
    async def _edit_card(interaction: discord.Interaction, content: str) -> None:
        try:
            await interaction.edit_original_response(content=content, view=None)
        except discord.HTTPException as exc:
            log.info("could not edit a call card (Discord no longer allows it): %s", exc.status)


async def setup(bot: MemoryBot) -> None:
    await bot.add_cog(Calls(bot))
