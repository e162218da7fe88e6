"""/chat and direct messages: text conversations with the agent, on the same memory as voice calls.

Memory rules, in the order they apply:
- `/chat public:True` posts the answer in the channel, so it never uses memory (nothing private can surface in
  a channel) and is not remembered. Where the bot cannot post (a server that never added it, a group DM: the member
  uses their own install there, `bot.places`), the answer is shown to the member alone, with why.
  `/chat private:True` answers without reading or writing memory.
- A member who chose "without memory" (here or at `/call`) is never remembered; a paused memory is handled by
  ChatService (nothing is read or stored).
- A member who never chose is asked first, with the same choice as `/call` (Remember me / Without memory).
  Their message waits in the prompt and is answered after the click; nothing is stored before they choose.

Answers stream in: the reply is edited as text arrives (at most every EDIT_INTERVAL_SECONDS or EDIT_CHARS new
characters) and continues in a new message at Discord's 2000-character limit.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import AsyncGenerator, Awaitable, Callable

import aiohttp
import discord
from discord import app_commands
from discord.ext import commands

from bot.client import MemoryBot, report_message_error, where_used
from bot.i18n import Words
from bot.memory.chat import ChatDisabled, ChatService
from bot.translator import options, words_of
from cogs._consent import ChoiceButton, MemoryChoiceView

log = logging.getLogger(__name__)

MESSAGE_LIMIT = 2000
EDIT_INTERVAL_SECONDS = 1.0
EDIT_CHARS = 400
CONSENT_VIEW_SECONDS = 10 * 60
CHAT_RATE, CHAT_PER_SECONDS = 10, 60.0
"""At most this many messages per member per minute, for /chat and for DMs (each counted on its own)."""

NO_MENTIONS = discord.AllowedMentions.none()
Editor = Callable[[str], Awaitable[object]]
Opener = Callable[[str], Awaitable[Editor]]


def choice_saved(remember: bool, words: Words) -> str:
    return words("chat.remember_chosen" if remember else "chat.no_memory_chosen")


def split_point(text: str, limit: int = MESSAGE_LIMIT) -> int:
    """Where to cut text longer than `limit`: after the last line break, else the last space, in the second
    half of the window; a hard cut when there is neither."""
    if len(text) <= limit:
        return len(text)
    window = text[:limit]
    for separator in ("\n", " "):
        cut = window.rfind(separator)
        if cut >= limit // 2:
            return cut + 1
    return limit


class StreamedAnswer:
    """Shows an answer while it streams: opens a message with the first text, edits it as more arrives
    (throttled), and continues in a new message when Discord's length limit is reached."""

    def __init__(
        self,
        open_first: Opener,
        open_next: Opener,
        *,
        empty_text: str,
        limit: int = MESSAGE_LIMIT,
        interval: float = EDIT_INTERVAL_SECONDS,
        chars: int = EDIT_CHARS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._open_first = open_first
        self._open_next = open_next
        self.empty_text = empty_text
        """Shown when the answer had no text at all."""
        self.limit = limit
        self.interval = interval
        self.chars = chars
        self.clock = clock
        self.pages: list[str] = []
        """Every message's text as last shown, in order."""
        self._current = ""
        self._editor: Editor | None = None
        self._last_shown_at = -math.inf

    async def feed(self, delta: str) -> None:
        self._current += delta
        while len(self._current) > self.limit:
            cut = split_point(self._current, self.limit)
            head, self._current = self._current[:cut], self._current[cut:]
            await self._show(head)
            self._editor = None
        shown = self.pages[-1] if self._editor is not None else ""
        if len(self._current) - len(shown) >= self.chars or self.clock() - self._last_shown_at >= self.interval:
            await self._show(self._current)

    async def finish(self) -> None:
        if not self.pages and not self._current.strip():
            self._current = self.empty_text
        await self._show(self._current)

    async def _show(self, text: str) -> None:
        if not text.strip():
            return  # Discord refuses empty messages; whitespace waits for the text after it
        if self._editor is None:
            self._editor = await (self._open_next if self.pages else self._open_first)(text)
            self.pages.append(text)
        elif self.pages[-1] != text:
            await self._editor(text)
            self.pages[-1] = text
        self._last_shown_at = self.clock()


async def show_stream(
    deltas: AsyncGenerator[str, None], open_first: Opener, open_next: Opener, words: Words
) -> StreamedAnswer:
    answer = StreamedAnswer(open_first, open_next, empty_text=words("chat.empty_answer"))
    async with contextlib.aclosing(deltas) as stream:
        async for delta in stream:
            await answer.feed(delta)
    await answer.finish()
    return answer


def interaction_openers(
    interaction: discord.Interaction, *, ephemeral: bool, into_original: bool
) -> tuple[Opener, Opener]:
    """Where an answer goes for an interaction: first into the original response (a deferred command) or a
    followup, then into followups."""

    async def original(text: str) -> Editor:
        await interaction.edit_original_response(content=text, allowed_mentions=NO_MENTIONS)

        async def edit(new: str) -> object:
            return await interaction.edit_original_response(content=new, allowed_mentions=NO_MENTIONS)

        return edit

    async def followup(text: str) -> Editor:
        sent = await interaction.followup.send(text, ephemeral=ephemeral, wait=True, allowed_mentions=NO_MENTIONS)

        async def edit(new: str) -> object:
            return await sent.edit(content=new, allowed_mentions=NO_MENTIONS)

        return edit

    return (original if into_original else followup), followup


def channel_openers(channel: discord.abc.Messageable) -> tuple[Opener, Opener]:
    async def send(text: str) -> Editor:
        sent = await channel.send(text, allowed_mentions=NO_MENTIONS)

        async def edit(new: str) -> object:
            return await sent.edit(content=new, allowed_mentions=NO_MENTIONS)

        return edit

    return send, send


async def show_typing(channel: discord.abc.Messageable) -> None:
    """Show "typing…" while the answer is prepared; a nicety, so a failure to show it never fails the answer."""
    try:
        await channel.typing()
    except (discord.HTTPException, aiohttp.ClientError, TimeoutError) as exc:
        log.info("could not show typing in a direct message (%s); answering anyway", type(exc).__name__)


class Chat(commands.Cog):
    def __init__(self, bot: MemoryBot):
        self.bot = bot
        self.dm_limits = commands.CooldownMapping.from_cooldown(CHAT_RATE, CHAT_PER_SECONDS, commands.BucketType.user)

    async def cog_load(self) -> None:
        self.bot.add_dynamic_items(ChoiceButton)

    def chat_service(self) -> ChatService:
        chat = self.bot.services.chat
        if chat is None or not chat.enabled:
            raise ChatDisabled("text chat needs an LLM")
        return chat

    # ---- /chat -----------------------------------------------------------------------------------------

    @app_commands.command(name="chat", description="Write to the agent; it remembers you like in calls")
    @options(
        message="What you want to say",
        public="Post the answer in this channel (public answers never use or add to your memory)",
        private="Answer without reading or writing your memory",
    )
    @app_commands.checks.cooldown(CHAT_RATE, CHAT_PER_SECONDS, key=lambda i: i.user.id)
    async def chat(
        self,
        interaction: discord.Interaction,
        message: app_commands.Range[str, 1, MESSAGE_LIMIT],
        public: bool = False,
        private: bool = False,
    ) -> None:
        chat = self.chat_service()  # before deferring, so "chat is off" is never posted publicly
        place = where_used(interaction)
        posted = public and place.can_post
        await interaction.response.defer(ephemeral=not posted, thinking=True)
        words = words_of(interaction)
        if not (public or private):
            standing = await self.bot.services.choices.chat_privately(interaction.user.id)
            if standing is None:
                view = self.memory_choice_view(
                    interaction.user.id, place.settings_guild, message, words, ephemeral=True
                )
                prompt = await interaction.followup.send(words("chat.consent"), view=view, ephemeral=True, wait=True)
                view.shown_in(self.bot, prompt)
                return
            private = standing
        first, more = interaction_openers(interaction, ephemeral=not posted, into_original=True)
        deltas = chat.reply(interaction.user.id, place.settings_guild, message, private=private, public=public)
        await show_stream(deltas, first, more, words)
        if public:
            note = "chat.public_not_remembered" if posted else "chat.public_cannot_post"
            await interaction.followup.send(words(note), ephemeral=True)

    def memory_choice_view(
        self, owner_id: int, guild_id: int | None, text: str, words: Words, *, ephemeral: bool
    ) -> MemoryChoiceView:
        """The memory choice, holding the member's message until they answer it."""

        async def chosen(interaction: discord.Interaction, remember: bool) -> None:
            chat = self.chat_service()
            clicked = words_of(interaction)
            await interaction.response.edit_message(content=choice_saved(remember, clicked), view=None)
            await self.bot.services.choices.choose(interaction.user.id, remember)
            first, more = interaction_openers(interaction, ephemeral=ephemeral, into_original=False)
            deltas = chat.reply(interaction.user.id, guild_id, text, private=not remember)
            await show_stream(deltas, first, more, clicked)

        return MemoryChoiceView(
            owner_id,
            "chat",
            chosen,
            words,
            decline_label=words("chat.without_memory"),
            expired_text=words("chat.consent_expired"),
            timeout=CONSENT_VIEW_SECONDS,
        )

    async def chosen_after_restart(self, interaction: discord.Interaction, remember: bool) -> None:
        """A memory choice sent before a restart: the message that waited for it is gone, so save the choice
        and ask for the message again."""
        words = words_of(interaction)
        saved = f"{choice_saved(remember, words)} {words('chat.send_again')}"
        await interaction.response.edit_message(content=saved, view=None)
        await self.bot.services.choices.choose(interaction.user.id, remember)

    # ---- direct messages -------------------------------------------------------------------------------

    @commands.Cog.listener()
    async def on_message(self, message: discord.Message) -> None:
        if message.guild is not None or not isinstance(message.channel, discord.DMChannel):
            return  # server messages are never read
        if message.author.bot or message.author == self.bot.user:
            return
        text = message.content.strip()
        if not text:
            return
        try:
            await self.answer_dm(message, text)
        except Exception as error:
            await report_message_error(self.bot, message, error)

    async def answer_dm(self, message: discord.Message, text: str) -> None:
        """A direct message carries no locale: the member's last known one (from an interaction), else English."""
        words = await self.bot.words_for_member(message.author.id)
        limit = self.dm_limits.get_bucket(message)
        retry_after = limit.update_rate_limit() if limit is not None else None
        if limit is not None and retry_after:
            raise app_commands.CommandOnCooldown(limit, retry_after)  # answered as /chat's cooldown is
        chat = self.chat_service()
        private = await self.bot.services.choices.chat_privately(message.author.id)
        if private is None:
            view = self.memory_choice_view(message.author.id, None, text, words, ephemeral=False)
            view.shown_in(self.bot, await message.channel.send(words("chat.consent"), view=view))
            return
        await show_typing(message.channel)
        first, more = channel_openers(message.channel)
        await show_stream(chat.reply(message.author.id, None, text, private=private), first, more, words)


async def setup(bot: MemoryBot) -> None:
    await bot.add_cog(Chat(bot))
