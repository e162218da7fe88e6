"""The one memory choice — **Remember me** or without memory — that /call and /chat ask before anything is stored.

Each command decides what happens after the choice (start the call, answer the waiting message); the prompt, its
owner check and its expiry are the same everywhere. The two buttons keep working after a restart: the process
that asked hands the choice to its waiting command; a later process hands it to the command's cog
(``chosen_after_restart``), which does what it still can (a call starts; a chat message that was waiting is gone,
so the member is asked to send it again)."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, Self

import discord

from bot.i18n import Words
from cogs._owned import OwnedControl, OwnedView, bot_of, owner_of

log = logging.getLogger(__name__)

OnChoice = Callable[[discord.Interaction, bool], Awaitable[None]]
Purpose = Literal["call", "chat"]
COGS: dict[str, str] = {"call": "Calls", "chat": "Chat"}
NOT_YOURS = "consent.not_yours"


class ChoiceAfterRestart(Protocol):
    async def chosen_after_restart(self, interaction: discord.Interaction, remember: bool) -> None: ...


class MemoryChoiceView(OwnedView):
    not_yours = NOT_YOURS

    def __init__(
        self,
        owner_id: int,
        purpose: Purpose,
        on_choice: OnChoice,
        words: Words,
        *,
        decline_label: str,
        expired_text: str,
        timeout: float,
    ):
        super().__init__(owner_id, timeout=timeout)
        self.on_choice = on_choice
        self.expired_text = expired_text
        self.add_item(ChoiceButton.make(owner_id, purpose, remember=True, label=words("consent.remember_me")))
        self.add_item(ChoiceButton.make(owner_id, purpose, remember=False, label=decline_label))

    def shown_in(self, client: discord.Client, message: discord.Message | discord.WebhookMessage) -> None:
        """Record the message this prompt was sent in (its expiry edits it; clicks on it come here)."""
        self.handle = message
        self.attach(client, message.id)

    async def on_timeout(self) -> None:
        await self.edit(content=self.expired_text, view=None)


class ChoiceButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[MemoryChoiceView]],
    template=r"consent:(?P<choice>remember|private):(?P<purpose>call|chat):(?P<owner>[0-9]+)",
):
    not_yours = NOT_YOURS

    def __init__(self, button: discord.ui.Button[MemoryChoiceView], owner_id: int, purpose: str, remember: bool):
        super().__init__(button, owner_id)
        self.purpose, self.remember = purpose, remember

    @classmethod
    def make(cls, owner_id: int, purpose: Purpose, *, remember: bool, label: str) -> Self:
        choice = "remember" if remember else "private"
        button: discord.ui.Button[MemoryChoiceView] = discord.ui.Button(
            label=label,
            style=discord.ButtonStyle.success if remember else discord.ButtonStyle.secondary,
            custom_id=f"consent:{choice}:{purpose}:{owner_id}",
        )
        return cls(button, owner_id, purpose, remember)

    @classmethod
    def state_from(cls, match: re.Match[str]) -> dict[str, Any]:
        return {"owner_id": owner_of(match), "purpose": match["purpose"], "remember": match["choice"] == "remember"}

    async def run(self, interaction: discord.Interaction) -> None:
        prompt = MemoryChoiceView.live(interaction)
        if prompt is not None:
            prompt.stop()
            await prompt.on_choice(interaction, self.remember)
            return
        cog: Any = bot_of(interaction).get_cog(COGS[self.purpose])
        if cog is None:
            raise RuntimeError(f"the {COGS[self.purpose]} cog that asked for this choice is not loaded")
        handler: ChoiceAfterRestart = cog
        log.info("user %s answered a memory choice sent before a restart", self.owner_id)
        await handler.chosen_after_restart(interaction, self.remember)
