"""The one memory choice — **Remember me** or without memory — that /call and /chat ask before anything is stored.

Each command decides what happens after the choice (start the call, answer the waiting message); the prompt, its
owner check and its expiry are the same everywhere."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import discord

from bot.client import FunnelledView

log = logging.getLogger(__name__)

OnChoice = Callable[[discord.Interaction, bool], Awaitable[None]]


class MemoryChoiceView(FunnelledView):
    def __init__(self, owner_id: int, on_choice: OnChoice, *, decline_label: str, expired_text: str, timeout: float):
        super().__init__(timeout=timeout)
        self.owner_id = owner_id
        self.on_choice = on_choice
        self.expired_text = expired_text
        self.without_memory.label = decline_label
        self.message: discord.Message | discord.WebhookMessage | None = None

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        if interaction.user.id != self.owner_id:
            await interaction.response.send_message("This choice belongs to someone else.", ephemeral=True)
            return False
        return True

    @discord.ui.button(label="Remember me", style=discord.ButtonStyle.success, custom_id="consent:remember")
    async def remember(self, interaction: discord.Interaction, button: discord.ui.Button[MemoryChoiceView]) -> None:
        self.stop()
        await self.on_choice(interaction, True)

    @discord.ui.button(label="Without memory", style=discord.ButtonStyle.secondary, custom_id="consent:private")
    async def without_memory(
        self, interaction: discord.Interaction, button: discord.ui.Button[MemoryChoiceView]
    ) -> None:
        self.stop()
        await self.on_choice(interaction, False)

    async def on_timeout(self) -> None:
        if self.message is None:
            return
        try:
            await self.message.edit(content=self.expired_text, view=None)
        except discord.HTTPException as exc:
            log.info("could not close an unanswered memory choice: %s", exc.status)
