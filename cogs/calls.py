"""/call and /hangup: start a voice call, hand over the link, end it from Discord.

Wherever the member is (`bot.places`): a server that added the bot applies its settings (calls off, limits); a
server that never added it, the bot's DMs and group DMs apply only the member's own per-day limit and the bot-wide
caps. Every answer is ephemeral."""

from __future__ import annotations

import logging
import re
from typing import Any, Self

import discord
from discord import app_commands
from discord.ext import commands

from bot.calls.service import CallEnded, CallService, StartedCall
from bot.client import MemoryBot, where_used
from bot.i18n import ENGLISH_TAG, Words
from bot.translator import options, words_of
from cogs._consent import ChoiceButton, MemoryChoiceView
from cogs._language import MEMBER_LANGUAGE_CHOICES, chosen, in_text
from cogs._owned import OwnedControl, OwnedView, bot_of, owner_of

log = logging.getLogger(__name__)

CONSENT_VIEW_SECONDS = 5 * 60
CARD_VIEW_SECONDS = 14 * 60
"""Ephemeral messages can be edited only while the interaction token lives (15 minutes)."""
NOT_YOUR_CALL = "calls.not_your_call"


def _cooldown(interaction: discord.Interaction[MemoryBot]) -> app_commands.Cooldown | None:
    seconds = interaction.client.settings.discord.call_cooldown_seconds
    return app_commands.Cooldown(1, seconds) if seconds > 0 else None


def card_text(started: StartedCall, words: Words, *, declined: bool = False) -> str:
    if declined:
        memory = words("calls.card.declined")
    elif started.memory_paused:
        memory = words("calls.card.paused")
    elif started.private:
        memory = words("calls.card.private")
    elif started.remembers_earlier:
        memory = words("calls.card.remembered")
    else:
        memory = words("calls.card.first")
    ready = words("calls.card.ready", memory=memory, minutes=words.count("count.minute", started.max_minutes))
    if started.language_wanted:
        return f"{ready}\n{words('calls.card.language_unavailable', language=in_text(started.language_wanted, words))}"
    if started.language != "en":
        return f"{ready}\n{words('calls.card.language', language=in_text(started.language, words))}"
    return ready


def page_link(started: StartedCall, words: Words) -> str:
    """The call page's link, asking for the page in the member's language (the page is served per call); English,
    the page's default, needs no ``lang``."""
    if words.language == ENGLISH_TAG:
        return started.link_url
    return f"{started.link_url}{'&' if '?' in started.link_url else '?'}lang={words.language}"


def ended_text(ended: CallEnded, words: Words, facts_learned: int | None = None, *, learning: bool = True) -> str:
    if not ended.saved:
        return words("calls.ended.not_saved")
    if ended.private:
        return words("calls.ended.private")
    parts = [words.count("calls.ended.kept", ended.turns_stored)]
    if ended.lines_lost:
        parts.append(words("calls.ended.lost", things=words.count("count.thing", ended.lines_lost)))
    if not learning:
        parts.append(words("calls.ended.see_memory"))
    elif facts_learned is None:
        parts.append(words("calls.ended.learning"))
    elif facts_learned == 0:
        parts.append(words("calls.ended.learned_nothing"))
    else:
        parts.append(words("calls.ended.learned", things=words.count("count.new_thing", facts_learned)))
    return " ".join(parts)


class CardView(OwnedView):
    """The call card: the link to the call page and **Hang up** (which works after a restart too)."""

    not_yours = NOT_YOUR_CALL

    def __init__(self, started: StartedCall, owner_id: int, words: Words):
        super().__init__(owner_id, timeout=CARD_VIEW_SECONDS)
        self.add_item(discord.ui.Button(label=words("calls.card.open_page"), url=page_link(started, words), emoji="📞"))
        self.add_item(HangUpButton.make(started.call_id, owner_id, words))


class HangUpButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[CardView]],
    template=r"call:hangup:(?P<call>[0-9a-f]{32}):(?P<owner>[0-9]+)",
):
    not_yours = NOT_YOUR_CALL

    def __init__(self, button: discord.ui.Button[CardView], call_id: str, owner_id: int):
        super().__init__(button, owner_id)
        self.call_id = call_id

    @classmethod
    def make(cls, call_id: str, owner_id: int, words: Words) -> Self:
        button: discord.ui.Button[CardView] = discord.ui.Button(
            label=words("calls.card.hang_up"),
            style=discord.ButtonStyle.danger,
            custom_id=f"call:hangup:{call_id}:{owner_id}",
        )
        return cls(button, call_id, owner_id)

    @classmethod
    def state_from(cls, match: re.Match[str]) -> dict[str, Any]:
        return {"call_id": match["call"], "owner_id": owner_of(match)}

    async def run(self, interaction: discord.Interaction) -> None:
        services = bot_of(interaction).services
        await interaction.response.defer()
        ended = None if services.calls is None else await services.calls.finalize(self.call_id, "hangup_button")
        words = words_of(interaction)
        if ended is None:
            content = words("calls.already_ended")
        else:
            content = ended_text(ended, words, learning=services.llm is not None)
        await interaction.edit_original_response(content=content, view=None)


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
        self.bot.add_dynamic_items(HangUpButton, ChoiceButton)
        if self.bot.services.calls is not None:
            self.calls.add_listener(self)
        self.bot.services.processed_listeners.append(self.call_processed)

    @app_commands.command(name="call", description="Start a voice call with the agent that remembers you")
    @options(
        private="Talk without the agent reading or writing your memory",
        language="The language the agent hears and speaks; remembered for your next calls",
    )
    @app_commands.choices(language=MEMBER_LANGUAGE_CHOICES)
    @app_commands.checks.dynamic_cooldown(_cooldown, key=lambda i: i.user.id)
    async def call(self, interaction: discord.Interaction, private: bool = False, language: str | None = None) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        words = words_of(interaction)
        if self.bot.services.calls is None:
            await interaction.followup.send(words("errors.calls_not_configured"), ephemeral=True)
            return
        if language is not None:
            await self.bot.services.choices.set_call_language(interaction.user.id, chosen(language))
        if not private and await self.bot.services.choices.must_ask(interaction.user.id):
            view = MemoryChoiceView(
                interaction.user.id,
                "call",
                lambda choice, remember: self.choose(choice, remember=remember),
                words,
                decline_label=words("calls.without_memory"),
                expired_text=words("calls.consent_expired"),
                timeout=CONSENT_VIEW_SECONDS,
            )
            prompt = await interaction.followup.send(words("calls.consent"), view=view, ephemeral=True, wait=True)
            view.shown_in(self.bot, prompt)
            return
        await self.start_and_show(interaction, private=private)

    async def chosen_after_restart(self, interaction: discord.Interaction, remember: bool) -> None:
        """A memory choice sent before a restart still starts the call the member asked for."""
        await self.choose(interaction, remember=remember)

    async def choose(self, interaction: discord.Interaction, *, remember: bool) -> None:
        await interaction.response.edit_message(content=words_of(interaction)("calls.starting"), view=None)
        await self.bot.services.choices.choose(interaction.user.id, remember)
        await self.start_and_show(interaction, private=not remember, edit=True, declined=not remember)

    async def start_and_show(
        self, interaction: discord.Interaction, *, private: bool, edit: bool = False, declined: bool = False
    ) -> None:
        started = await self.calls.start(
            user_id=interaction.user.id,
            guild_id=where_used(interaction).settings_guild,
            private=private,
            locale=interaction.locale.value,
            name=interaction.user.display_name,
        )
        words = words_of(interaction)
        view = CardView(started, interaction.user.id, words)
        text = card_text(started, words, declined=declined)
        message: discord.Message
        if edit:
            message = await interaction.edit_original_response(content=text, view=view)
        else:
            message = await interaction.followup.send(text, view=view, ephemeral=True, wait=True)
        self._forget_expired_cards()
        self.cards[started.call_id] = (interaction, None)
        await self.calls.remember_card(started.call_id, interaction.token, message.id)

    @app_commands.command(name="hangup", description="End your voice call")
    async def hangup(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        words = words_of(interaction)
        if self.bot.services.calls is None:
            await interaction.followup.send(words("errors.calls_not_configured"), ephemeral=True)
            return
        ended = await self.calls.hang_up(interaction.user.id)
        await interaction.followup.send(ended_text(ended, words, learning=self.learning), ephemeral=True)

    async def call_ended(self, ended: CallEnded) -> None:
        card = self.cards.get(ended.call_id)
        if card is None:
            await self._edit_card_elsewhere(ended)
            return
        # decided before the edit is awaited: a post-call job finishing meanwhile (call_processed) must find the
        # card only if it is to report what was learned, or the card is edited twice
        if ended.private or ended.turns_stored == 0 or not self.learning or not ended.saved:
            self.cards.pop(ended.call_id, None)
        else:
            self.cards[ended.call_id] = (card[0], ended)
        await self._edit_card(card[0], ended_text(ended, words_of(card[0]), learning=self.learning))

    async def call_processed(self, kind: str, ref_id: str, facts_learned: int) -> None:
        card = self.cards.pop(ref_id, None)
        if kind != "post_call":
            return
        if card is not None and card[1] is not None:
            await self._edit_card(card[0], ended_text(card[1], words_of(card[0]), facts_learned))
            return
        if self.bot.services.calls is None or not self.learning:
            return
        ended = await self.calls.ended_call(ref_id)
        if ended is not None:  # shown by another process, or before a restart
            await self._edit_stored_card(
                ended, ended_text(ended, await self.bot.words_for_member(ended.user_id), facts_learned)
            )

    def _forget_expired_cards(self) -> None:
        """Discord lets a card be edited for 15 minutes; older ones are dropped so the map stays small."""
        for call_id, (interaction, _ended) in list(self.cards.items()):
            if interaction.is_expired():
                del self.cards[call_id]

    async def _edit_card_elsewhere(self, ended: CallEnded) -> None:
        """The call was shown by another bot process (or before a restart): edit its card through the token."""
        words = await self.bot.words_for_member(ended.user_id)
        await self._edit_stored_card(ended, ended_text(ended, words, learning=self.learning))

    async def _edit_stored_card(self, ended: CallEnded, content: str) -> None:
        if ended.card is None or self.bot.application_id is None:
            return
        token, message_id = ended.card
        webhook = discord.Webhook.partial(self.bot.application_id, token, client=self.bot)
        try:
            await webhook.edit_message(message_id, content=content, view=None)
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
