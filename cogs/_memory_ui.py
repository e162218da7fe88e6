"""The /memory panel: facts with source and date, calls and chats, pages, **Export**, **Pause memory** /
**Resume memory**, **Forget…** (``cogs._forget_ui``) and **Edit a fact…** (``cogs._own_words``); its buttons keep
working after a restart (see ``cogs._owned``). What it says is in ``cogs._memory_texts``; what it does, in
``cogs._memory_actions``."""

from __future__ import annotations

import re
from typing import Any, Literal

import discord

from bot.memory.service import MemoryPage
from bot.store.models import FactRecord
from cogs._forget_ui import FORGET_CONTROLS, ForgetPickerView
from cogs._memory_actions import MemoryActions
from cogs._memory_texts import remembering, render_page
from cogs._own_words import EDIT_CONTROLS, edit_menu
from cogs._owned import OwnedControl, OwnedView, owner_of

MEMORY_VIEW_SECONDS = 10 * 60
"""Inactivity timeout of the /memory panel; below the 15-minute life of an interaction token, so the buttons
can still be disabled when it expires."""
AUTOCOMPLETE_LIMIT = 25
AUTOCOMPLETE_FACT_SCAN = 1000
AUTOCOMPLETE_CONVERSATION_SCAN = 50


PanelAction = Literal["prev", "next", "export", "toggle", "forget"]


class MemoryView(OwnedView):
    """The /memory panel. Every click on it is acknowledged at once with a deferred update of it (the store may be
    waiting for another writer, and Discord gives an interaction 3 seconds), then answered by editing it, so the
    latest click can still disable the buttons when the panel times out."""

    not_yours = "memory.not_yours"

    def __init__(self, actions: MemoryActions, owner_id: int, page: MemoryPage, index: int, pages: int):
        super().__init__(owner_id, timeout=MEMORY_VIEW_SECONDS)
        self.actions = actions
        self.sync(page, index, pages)

    @classmethod
    async def open(cls, actions: MemoryActions, owner_id: int, index: int) -> MemoryView:
        return cls(actions, owner_id, *await actions.load(owner_id, index))

    def sync(self, page: MemoryPage, index: int, pages: int) -> None:
        self.page, self.index, self.pages = page, index, pages
        self.clear_items()
        on, words = remembering(page), self.actions.words
        toggle = "memory.button.pause" if on else "memory.button.resume" if page.chosen else "consent.remember_me"
        for action, label, emoji, style, row, disabled in (
            ("prev", "◀", None, discord.ButtonStyle.secondary, 0, index <= 0),
            ("next", "▶", None, discord.ButtonStyle.secondary, 0, index >= pages - 1),
            ("export", words("memory.button.export"), "📦", discord.ButtonStyle.primary, 1, False),
            (
                "toggle",
                words(toggle),
                "⏸️" if on else "▶️",
                discord.ButtonStyle.secondary if on else discord.ButtonStyle.success,
                1,
                False,
            ),
            (
                "forget",
                words("memory.button.forget"),
                "🗑️",
                discord.ButtonStyle.danger,
                1,
                not (page.facts or page.superseded or page.conversations),
            ),
        ):
            button: discord.ui.Button[MemoryView] = discord.ui.Button(
                label=label,
                emoji=emoji,
                style=style,
                row=row,
                disabled=disabled,
                custom_id=f"memory:{action}:{self.owner_id}:{index}",
            )
            self.add_item(PanelButton(button, self.owner_id, action, index))  # type: ignore[arg-type]
        menu = edit_menu(self.owner_id, page.facts, words)
        if menu is not None:
            self.add_item(menu)

    def current_fact(self, fact_id: int) -> FactRecord | None:
        """The current fact ``fact_id`` as this panel shows it, if it does."""
        return next((f for f in self.page.facts if f.fact_id == fact_id), None)

    def embed(self) -> discord.Embed:
        return render_page(self.page, self.index, self.pages, self.actions.words)

    async def show(self, interaction: discord.Interaction, index: int) -> None:
        """Answer a (deferred) click on this panel with the given page."""
        self.sync(*await self.actions.load(self.owner_id, index))
        await self.replace(interaction, embed=self.embed())

    async def refresh(self) -> None:
        """Re-read the current page after something was forgotten from another message."""
        if self.is_finished():
            return
        self.sync(*await self.actions.load(self.owner_id, self.index))
        await self.edit(embed=self.embed(), view=self)

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(view=self)

    async def act(self, action: str, interaction: discord.Interaction) -> None:
        """Carry out a click on this panel, already acknowledged with ``interaction.response.defer()``."""
        self.timeout = self.timeout  # a click restarts the inactivity timeout
        if action == "prev":
            await self.show(interaction, max(0, self.index - 1))
        elif action == "next":
            await self.show(interaction, self.index + 1)
        elif action == "toggle":
            await self.actions.set_memory_enabled(self.owner_id, not remembering(self.page))
            await self.show(interaction, self.index)
        elif action == "export":
            self.handle = interaction
            await self.actions.send_export(interaction)
        elif action == "forget":
            self.handle = interaction
            picker = ForgetPickerView(self.actions, self.owner_id, self.page, after=self.refresh)
            await picker.send_followup(interaction, self.actions.words("memory.pick_prompt"))


class PanelButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[MemoryView]],
    template=r"memory:(?P<action>prev|next|export|toggle|forget):(?P<owner>[0-9]+):(?P<index>[0-9]+)",
):
    not_yours = "memory.not_yours"

    def __init__(self, button: discord.ui.Button[MemoryView], owner_id: int, action: PanelAction, index: int):
        super().__init__(button, owner_id)
        self.action, self.index = action, index

    @classmethod
    def state_from(cls, match: re.Match[str]) -> dict[str, Any]:
        return {"owner_id": owner_of(match), "action": match["action"], "index": int(match["index"])}

    async def run(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer()  # first: every action reads or writes the store
        panel = MemoryView.live(interaction)
        if panel is None:  # sent by an earlier process: rebuild it from the custom_id
            panel = await MemoryView.open(MemoryActions.of(interaction), self.owner_id, self.index)
        await panel.act(self.action, interaction)


PERSISTENT_CONTROLS: tuple[type[discord.ui.DynamicItem[Any]], ...] = (PanelButton, *FORGET_CONTROLS, *EDIT_CONTROLS)
"""Registered by the memory cog, so a click on any of them is handled whatever process sent the message."""
