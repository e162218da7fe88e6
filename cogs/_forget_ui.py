"""Forgetting from /forget and the panel's **Forget…**: one fact, one call or chat, or everything, each after a
confirmation that says what goes. Every control keeps working after a restart (see ``cogs._owned``)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, Self

import discord

from bot.i18n import Words
from bot.memory.service import MemoryPage
from bot.store.models import Conversation
from bot.translator import words_of
from cogs._memory_actions import MemoryActions
from cogs._memory_texts import confirm_fact_text, picker_options
from cogs._owned import OwnedControl, OwnedView, owner_of

PICKER_SECONDS = 5 * 60
CONFIRM_SECONDS = 2 * 60
NO_MENTIONS = discord.AllowedMentions.none()

After = Callable[[], Awaitable[None]] | None


async def forget_fact_asking(
    actions: MemoryActions,
    interaction: discord.Interaction,
    value: str,
    *,
    after: After = None,
    in_place: bool,
) -> None:
    """Ask first, saying what goes: the fact, and what else goes with it. ``interaction`` is already acknowledged
    (deferred). ``in_place``: answer by editing the clicked message (the picker) rather than with a new message."""
    owner = interaction.user.id
    traces = await actions.fact_traces(owner, value)
    if traces is not None:
        confirm = ConfirmFactView(actions, owner, traces.fact.fact_id, after=after)
        question = confirm_fact_text(traces, actions.words)
        if in_place:
            await confirm.replace(interaction, content=question)
        else:
            await confirm.send_followup(interaction, question, allowed_mentions=NO_MENTIONS)
        return
    text = actions.words("memory.not_found")
    if in_place:
        await interaction.edit_original_response(content=text, view=None, allowed_mentions=NO_MENTIONS)
    else:
        await interaction.followup.send(text, ephemeral=True, allowed_mentions=NO_MENTIONS)
    if after is not None:
        await after()


async def forget_conversation_asking(
    actions: MemoryActions,
    interaction: discord.Interaction,
    value: str,
    *,
    after: After = None,
    in_place: bool,
) -> None:
    """Ask before forgetting a whole call or chat, saying what goes with it. ``interaction`` is already
    acknowledged (deferred); ``in_place`` as in ``forget_fact_asking``."""
    owner = interaction.user.id
    convo, text = await actions.confirm_conversation_text(owner, value)
    if convo is not None:
        confirm = ConfirmConversationView(actions, owner, convo, after=after)
        if in_place:
            await confirm.replace(interaction, content=text)
        else:
            await confirm.send_followup(interaction, text)
        return
    if in_place:
        await interaction.edit_original_response(content=text, view=None)
    else:
        await interaction.followup.send(text, ephemeral=True)


class _ForgetStep(OwnedView):
    """A step of forgetting (picker, confirmation): what it works with, and what to refresh afterwards."""

    def __init__(self, actions: MemoryActions, owner_id: int, *, timeout: float, after: After):
        super().__init__(owner_id, timeout=timeout)
        self.actions = actions
        self.after = after

    @classmethod
    def take(cls, interaction: discord.Interaction) -> tuple[MemoryActions, After]:
        """A click on this step's message ends the step: its actions and follow-up when it is live here; after a
        restart, fresh actions and nothing to refresh."""
        step = cls.live(interaction)
        if step is None:
            return MemoryActions.of(interaction), None
        step.stop()
        return step.actions, step.after


class ForgetPickerView(_ForgetStep):
    """What **Forget…** opens: one item of the panel's current page, or everything (after a confirmation)."""

    def __init__(self, actions: MemoryActions, owner_id: int, page: MemoryPage, *, after: After):
        super().__init__(actions, owner_id, timeout=PICKER_SECONDS, after=after)
        words = actions.words
        options = picker_options(page, words)
        if options:
            select: discord.ui.Select[ForgetPickerView] = discord.ui.Select(
                placeholder=words("memory.picker.placeholder"),
                min_values=1,
                max_values=1,
                row=0,
                options=options,
                custom_id=f"forget:pick:{owner_id}",
            )
            self.add_item(PickSelect(select, owner_id))
        self.add_item(EverythingButton.make(owner_id, words))
        self.add_item(CancelButton.make(owner_id, words))

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(view=self)


class PickSelect(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Select[ForgetPickerView]],
    template=r"forget:pick:(?P<owner>[0-9]+)",
):
    async def run(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer()  # first: both kinds of item are looked up in the store
        actions, after = ForgetPickerView.take(interaction)
        value = self.item.values[0]
        if value.startswith("fact:"):
            await forget_fact_asking(actions, interaction, value.removeprefix("fact:"), after=after, in_place=True)
            return
        await forget_conversation_asking(actions, interaction, value, after=after, in_place=True)


class EverythingButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[ForgetPickerView]],
    template=r"forget:everything:(?P<owner>[0-9]+)",
):
    """The picker's **Forget everything…**: asks for a confirmation."""

    @classmethod
    def make(cls, owner_id: int, words: Words) -> Self:
        return cls(
            discord.ui.Button(
                label=words("memory.button.forget_everything_ask"),
                style=discord.ButtonStyle.danger,
                row=1,
                custom_id=f"forget:everything:{owner_id}",
            ),
            owner_id,
        )

    async def run(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer()  # first: the confirmation counts what would go
        actions, after = ForgetPickerView.take(interaction)
        confirm = ConfirmEverythingView(actions, self.owner_id, after=after)
        await confirm.replace(interaction, content=await actions.confirm_text(self.owner_id))


class CancelButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[OwnedView]],
    template=r"forget:cancel:(?P<owner>[0-9]+)",
):
    """**Cancel** on the picker and on every confirmation."""

    @classmethod
    def make(cls, owner_id: int, words: Words, row: int | None = 1) -> Self:
        return cls(
            discord.ui.Button(
                label=words("memory.button.cancel"),
                style=discord.ButtonStyle.secondary,
                row=row,
                custom_id=f"forget:cancel:{owner_id}",
            ),
            owner_id,
        )

    async def run(self, interaction: discord.Interaction) -> None:
        view = OwnedView.live(interaction)
        if view is not None:
            view.stop()
        await interaction.response.edit_message(content=words_of(interaction)("memory.cancelled"), view=None)


class ConfirmEverythingView(_ForgetStep):
    def __init__(self, actions: MemoryActions, owner_id: int, *, after: After = None):
        super().__init__(actions, owner_id, timeout=CONFIRM_SECONDS, after=after)
        self.add_item(ConfirmEverythingButton.make(owner_id, actions.words))
        self.add_item(CancelButton.make(owner_id, actions.words, row=None))

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(content=self.actions.words("memory.confirm_expired"), view=self)


class ConfirmEverythingButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[ConfirmEverythingView]],
    template=r"forget:confirm:(?P<owner>[0-9]+)",
):
    @classmethod
    def make(cls, owner_id: int, words: Words) -> Self:
        return cls(
            discord.ui.Button(
                label=words("memory.button.forget_everything"),
                style=discord.ButtonStyle.danger,
                custom_id=f"forget:confirm:{owner_id}",
            ),
            owner_id,
        )

    async def run(self, interaction: discord.Interaction) -> None:
        actions, after = ConfirmEverythingView.take(interaction)
        await interaction.response.defer()
        text = await actions.forget_everything(self.owner_id)
        await interaction.edit_original_response(content=text, view=None)
        if after is not None:
            await after()


class ConfirmFactView(_ForgetStep):
    """Forgetting one fact that also removes lines or summaries: asked first."""

    def __init__(self, actions: MemoryActions, owner_id: int, fact_id: int, *, after: After = None):
        super().__init__(actions, owner_id, timeout=CONFIRM_SECONDS, after=after)
        self.add_item(ConfirmFactButton.make(owner_id, fact_id, actions.words))
        self.add_item(CancelButton.make(owner_id, actions.words, row=None))

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(content=self.actions.words("memory.confirm_fact_expired"), view=self)


class ConfirmFactButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[ConfirmFactView]],
    template=r"forget:fact:(?P<owner>[0-9]+):(?P<fact>[0-9]+)",
):
    def __init__(self, button: discord.ui.Button[ConfirmFactView], owner_id: int, fact_id: int):
        super().__init__(button, owner_id)
        self.fact_id = fact_id

    @classmethod
    def make(cls, owner_id: int, fact_id: int, words: Words) -> Self:
        return cls(
            discord.ui.Button(
                label=words("memory.button.forget_it"),
                style=discord.ButtonStyle.danger,
                custom_id=f"forget:fact:{owner_id}:{fact_id}",
            ),
            owner_id,
            fact_id,
        )

    @classmethod
    def state_from(cls, match: re.Match[str]) -> dict[str, Any]:
        return {"owner_id": owner_of(match), "fact_id": int(match["fact"])}

    async def run(self, interaction: discord.Interaction) -> None:
        actions, after = ConfirmFactView.take(interaction)
        await interaction.response.defer()
        text = await actions.forget_fact(self.owner_id, self.fact_id)
        await interaction.edit_original_response(content=text, view=None, allowed_mentions=NO_MENTIONS)
        if after is not None:
            await after()


class ConfirmConversationView(_ForgetStep):
    """Forgetting a whole call or chat, its lines and the facts that came only from it: asked first."""

    def __init__(self, actions: MemoryActions, owner_id: int, convo: Conversation, *, after: After = None):
        super().__init__(actions, owner_id, timeout=CONFIRM_SECONDS, after=after)
        self.add_item(ConfirmConversationButton.make(owner_id, convo, actions.words))
        self.add_item(CancelButton.make(owner_id, actions.words, row=None))

    async def on_timeout(self) -> None:
        self.disable_all()
        await self.edit(content=self.actions.words("memory.confirm_conversation_expired"), view=self)


class ConfirmConversationButton(
    OwnedControl,
    discord.ui.DynamicItem[discord.ui.Button[ConfirmConversationView]],
    template=r"forget:convo:(?P<owner>[0-9]+):(?P<kind>call|chat):(?P<ref>[0-9A-Za-z_-]{1,64})",
):
    def __init__(self, button: discord.ui.Button[ConfirmConversationView], owner_id: int, value: str):
        super().__init__(button, owner_id)
        self.value = value

    @classmethod
    def make(cls, owner_id: int, convo: Conversation, words: Words) -> Self:
        return cls(
            discord.ui.Button(
                label=words(f"memory.button.forget_{convo.kind}"),
                style=discord.ButtonStyle.danger,
                custom_id=f"forget:convo:{owner_id}:{convo.kind}:{convo.ref_id}",
            ),
            owner_id,
            f"{convo.kind}:{convo.ref_id}",
        )

    @classmethod
    def state_from(cls, match: re.Match[str]) -> dict[str, Any]:
        return {"owner_id": owner_of(match), "value": f"{match['kind']}:{match['ref']}"}

    async def run(self, interaction: discord.Interaction) -> None:
        actions, after = ConfirmConversationView.take(interaction)
        await interaction.response.defer()
        text = await actions.forget_conversation(self.owner_id, self.value)
        await interaction.edit_original_response(content=text, view=None, allowed_mentions=NO_MENTIONS)
        if after is not None:
            await after()


FORGET_CONTROLS: tuple[type[discord.ui.DynamicItem[Any]], ...] = (
    PickSelect,
    EverythingButton,
    CancelButton,
    ConfirmEverythingButton,
    ConfirmFactButton,
    ConfirmConversationButton,
)
