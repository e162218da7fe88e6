"""What `/remember` answers and how a fact is edited from the `/memory` panel, in the member's own words.

The panel's **Edit a fact…** menu opens a modal holding the fact's current text. A modal must be the first answer
to a click, so the menu reads the fact from the live panel (this process sent it: nothing to read from the
database). A panel sent before a restart has no live view: the menu then acknowledges first, reads the fact, and
answers with an **Edit** button whose click opens the modal. The modal's submission is acknowledged before the
database is touched. What an edit does (the new text is told by the member, the old one stays as history) is
``bot.memory.own_words``'s rule; this module only renders it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, Self, runtime_checkable

import discord

from bot.client import report_error
from bot.i18n import Words
from bot.memory.own_words import MAX_FACT_CHARS, Act, OwnWords, Refusal
from bot.memory.wording import for_member
from bot.store.models import FactRecord
from bot.translator import words_of
from cogs._owned import NOT_YOURS, OwnedControl, OwnedView, bot_of, owner_check, owner_of

log = logging.getLogger(__name__)

NO_MENTIONS = discord.AllowedMentions.none()
EDIT_SECONDS = 10 * 60
"""How long an edit modal or an **Edit** button waits; within the 15-minute life of the interaction token."""
FACT_ID = re.compile(r"[0-9]{1,18}")

After = Callable[[], Awaitable[None]] | None


def _quoted(text: str, limit: int = 1500) -> str:
    flat = " ".join(text.split())
    flat = flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"
    return discord.utils.escape_markdown(flat)


def remember_text(result: Act | Refusal, words: Words) -> str:
    """What `/remember` answers."""
    if isinstance(result, str):
        return words(f"own.refusal.{result}")
    if result.outcome == "remembered" and result.fact is not None:
        return words("own.remembered", fact=_quoted(result.fact))
    return words("own.nothing", example=words("own.example"))


def edited_text(act: Act, words: Words) -> str:
    """What an edit from the panel answers."""
    if act.outcome == "corrected" and act.fact is not None:
        return words("own.unchanged") if act.fact == act.replaced else words("own.edited", fact=_quoted(act.fact))
    if act.outcome == "empty":
        return words("own.edit_empty")
    if act.outcome == "refused":
        return words("own.edit_paused")
    return words("own.edit_gone")


@runtime_checkable
class FactPanel(Protocol):
    """The live `/memory` panel, as the edit menu needs it (``cogs._memory_ui.MemoryView``)."""

    def current_fact(self, fact_id: int) -> FactRecord | None: ...
    async def refresh(self) -> None: ...
    async def edit(self, **changes: Any) -> None: ...


def edit_menu(owner_id: int, facts: Sequence[FactRecord], words: Words) -> EditSelect | None:
    """The panel's **Edit a fact…** menu over the current facts it shows, or None when it shows none."""
    if not facts:
        return None
    options = [
        discord.SelectOption(
            label=" ".join(for_member(f.text, told=f.told).split())[:100]
            or words("memory.fact_fallback", id=f.fact_id),
            value=str(f.fact_id),
            description=words("own.option.told" if f.told else "own.option.learned"),
            emoji="✏️",
        )
        for f in facts[:25]
    ]
    select: discord.ui.Select[OwnedView] = discord.ui.Select(
        placeholder=words("own.edit_placeholder"),
        min_values=1,
        max_values=1,
        row=2,
        options=options,
        custom_id=f"memory:edit:{owner_id}",
    )
    return EditSelect(select, owner_id)


class FactEditModal(discord.ui.Modal):
    """The fact's current text, to change in place; submitting replaces the fact (the old one becomes history)."""

    def __init__(self, owner_id: int, fact: FactRecord, words: Words, *, after: After = None) -> None:
        super().__init__(
            title=words("own.modal.title"), timeout=EDIT_SECONDS, custom_id=f"fact:modal:{owner_id}:{fact.fact_id}"
        )
        self.owner_id, self.fact_id, self.after = owner_id, fact.fact_id, after
        self.stored, self.shown = fact.text, for_member(fact.text, told=fact.told)
        self.text: discord.ui.TextInput[FactEditModal] = discord.ui.TextInput(
            label=words("own.modal.label"),
            style=discord.TextStyle.paragraph,
            default=self.shown[:MAX_FACT_CHARS],
            min_length=1,
            max_length=MAX_FACT_CHARS,
            custom_id="fact",
        )
        self.add_item(self.text)

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        return await owner_check(interaction, self.owner_id, NOT_YOURS)

    async def on_submit(self, interaction: discord.Interaction, /) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)  # first: the edit writes the store
        right = self.text.value
        if " ".join(right.split()) == " ".join(self.shown.split()):
            right = self.stored  # sent as shown: nothing changed, though the member read it in the second person
        act = await OwnWords(bot_of(interaction).services.memory).correct_fact(self.owner_id, self.fact_id, right)
        log.info("user %s edited fact %s: %s", self.owner_id, self.fact_id, act.outcome)
        text = edited_text(act, words_of(interaction))
        await interaction.edit_original_response(content=text, allowed_mentions=NO_MENTIONS)
        if self.after is not None and act.outcome == "corrected":
            await self.after()

    async def on_error(self, interaction: discord.Interaction, error: Exception, /) -> None:  # type: ignore[override]
        # discord.py calls a modal's on_error without an item; its typing inherits the view's signature.
        await report_error(interaction, error)


async def offer_edit(interaction: discord.Interaction, owner_id: int, fact_id: int | None) -> None:
    """Without a live view to take the text from: ``interaction`` is acknowledged (deferred, ephemeral), the fact
    is read, and an **Edit** button that opens the modal is shown."""
    own_words = OwnWords(bot_of(interaction).services.memory)
    fact = None if fact_id is None else await own_words.editable_fact(owner_id, fact_id)
    if fact is None:
        await interaction.edit_original_response(content=words_of(interaction)("own.edit_gone"))
        return
    words = words_of(interaction)
    prompt = EditPrompt(owner_id, fact, words)
    text = words("own.edit_prompt", fact=_quoted(for_member(fact.text, told=fact.told), 300))
    await prompt.send(interaction, text, allowed_mentions=NO_MENTIONS)


def _fact_id(value: str) -> int | None:
    return int(value) if FACT_ID.fullmatch(value) else None


class EditSelect(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Select[OwnedView]],
    template=r"memory:edit:(?P<owner>[0-9]+)",
):
    """The panel's **Edit a fact…**: opens the modal at once when the panel is live here."""

    async def run(self, interaction: discord.Interaction) -> None:
        fact_id = _fact_id(self.item.values[0])
        panel = OwnedView.live(interaction)
        fact = panel.current_fact(fact_id) if isinstance(panel, FactPanel) and fact_id is not None else None
        if panel is None or not isinstance(panel, FactPanel) or fact is None:
            await interaction.response.defer(ephemeral=True, thinking=True)  # first: the fact is read
            await offer_edit(interaction, self.owner_id, fact_id)
            return
        modal = FactEditModal(self.owner_id, fact, words_of(interaction), after=panel.refresh)
        await interaction.response.send_modal(modal)
        await panel.edit(view=panel)  # the menu shows no choice again, so the same fact can be picked again


class EditPrompt(OwnedView):
    """An **Edit** button for one fact, holding its text for the modal."""

    def __init__(self, owner_id: int, fact: FactRecord, words: Words) -> None:
        super().__init__(owner_id, timeout=EDIT_SECONDS)
        self.fact = fact
        self.add_item(EditButton.make(owner_id, fact.fact_id, words))

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(view=self)


class EditButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[EditPrompt]],
    template=r"fact:edit:(?P<owner>[0-9]+):(?P<fact>[0-9]+)",
):
    def __init__(self, button: discord.ui.Button[EditPrompt], owner_id: int, fact_id: int) -> None:
        super().__init__(button, owner_id)
        self.fact_id = fact_id

    @classmethod
    def make(cls, owner_id: int, fact_id: int, words: Words) -> Self:
        button: discord.ui.Button[EditPrompt] = discord.ui.Button(
            label=words("own.edit_button"),
            emoji="✏️",
            style=discord.ButtonStyle.primary,
            custom_id=f"fact:edit:{owner_id}:{fact_id}",
        )
        return cls(button, owner_id, fact_id)

    @classmethod
    def state_from(cls, match: re.Match[str]) -> dict[str, Any]:
        return {"owner_id": owner_of(match), "fact_id": int(match["fact"])}

    async def run(self, interaction: discord.Interaction) -> None:
        prompt = EditPrompt.live(interaction)
        if prompt is None:  # sent before a restart: read the fact again
            await interaction.response.defer(ephemeral=True, thinking=True)
            await offer_edit(interaction, self.owner_id, self.fact_id)
            return
        await interaction.response.send_modal(FactEditModal(self.owner_id, prompt.fact, words_of(interaction)))


EDIT_CONTROLS: tuple[type[discord.ui.DynamicItem[Any]], ...] = (EditSelect, EditButton)
