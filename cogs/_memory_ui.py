"""What /memory and /forget do: the memory actions, and the views (panel, picker, confirmations) whose controls
keep working after a restart (see ``cogs._owned``). What they say is in ``cogs._memory_texts``.

The views talk to :class:`MemoryActions` (the memory services), never to the cog."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Self

import discord

from bot.i18n import Words
from bot.memory.choices import MemberChoices
from bot.memory.forget_requests import ForgetRequests, Refusal
from bot.memory.forgetting import FactTraces
from bot.memory.service import MemoryPage, MemoryService
from bot.store.models import Conversation, FactRecord
from bot.translator import words_of
from cogs._memory_texts import (
    CONVERSATIONS_PER_PAGE,
    FACTS_PER_PAGE,
    confirm_conversation_text,
    confirm_fact_text,
    forgot_conversation_text,
    forgot_everything_text,
    forgot_fact_text,
    page_count,
    picker_options,
    remembering,
    render_page,
)
from cogs._own_words import EDIT_CONTROLS, edit_menu
from cogs._owned import OwnedControl, OwnedView, bot_of, owner_of

log = logging.getLogger(__name__)

MEMORY_VIEW_SECONDS = 10 * 60
"""Inactivity timeout of the /memory panel; below the 15-minute life of an interaction token, so the buttons
can still be disabled when it expires."""
PICKER_SECONDS = 5 * 60
CONFIRM_SECONDS = 2 * 60
AUTOCOMPLETE_LIMIT = 25
AUTOCOMPLETE_FACT_SCAN = 1000
AUTOCOMPLETE_CONVERSATION_SCAN = 50
REFUSED: dict[Refusal, str] = {"not_found": "memory.not_found", "still_running": "memory.call_still_running"}
NO_MENTIONS = discord.AllowedMentions.none()
FACT_ID = re.compile(r"[0-9]{1,18}")


# ---- what the views do: the memory services, behind one small interface ---------------------------------


def parse_conversation(value: str) -> Conversation | None:
    """The call or chat a picker or autocomplete value names ("call:<id>" or "chat:<id>"), if it names one."""
    kind, _, ref_id = value.strip().partition(":")
    return Conversation.named(kind, ref_id) if kind in ("call", "chat") and ref_id else None


class MemoryActions:
    """Everything /memory and /forget do to a member's memory, with the texts the member reads back. Who may
    forget what is ``ForgetRequests``' rule, pausing is ``MemberChoices``'. ``words``: the member's language."""

    def __init__(self, memory: MemoryService, choices: MemberChoices, forgetting: ForgetRequests, words: Words):
        self.memory = memory
        self.choices = choices
        self.forgetting = forgetting
        self.words = words

    @classmethod
    def of(cls, interaction: discord.Interaction) -> Self:
        services = bot_of(interaction).services
        return cls(services.memory, services.choices, services.forget_requests, words_of(interaction))

    async def load(self, user_id: int, index: int) -> tuple[MemoryPage, int, int]:
        """One page of the member's memory, the page index actually shown (clamped) and the page count."""
        page = await self.memory.page(
            user_id, page=index, facts_per_page=FACTS_PER_PAGE, calls_per_page=CONVERSATIONS_PER_PAGE
        )
        pages = page_count(page)
        if index >= pages:
            index = pages - 1
            page = await self.memory.page(
                user_id, page=index, facts_per_page=FACTS_PER_PAGE, calls_per_page=CONVERSATIONS_PER_PAGE
            )
        return page, index, pages

    async def set_memory_enabled(self, user_id: int, enabled: bool) -> None:
        await self.choices.set_remembering(user_id, enabled)

    async def send_export(self, interaction: discord.Interaction) -> None:
        """The member's memory as a JSON attachment, in a new ephemeral message (the interaction is acknowledged)."""
        user_id = interaction.user.id
        data = await self.memory.export(user_id)
        blob = json.dumps(data, indent=2, ensure_ascii=False).encode()
        if len(blob) > interaction.filesize_limit:
            too_large = self.words("memory.export_too_large", size=len(blob) / 1e6)
            await interaction.followup.send(too_large, ephemeral=True)
            log.info("export of user %s too large to attach (%d bytes)", user_id, len(blob))
            return
        file = discord.File(io.BytesIO(blob), filename=f"memory-{user_id}.json")
        await interaction.followup.send(self.words("memory.export_ready"), file=file, ephemeral=True)
        log.info("user %s exported their memory (%d bytes)", user_id, len(blob))

    async def fact_traces(self, user_id: int, value: str) -> FactTraces | None:
        """The member's fact ``value`` (its id as text) and what forgetting it also removes; None if not theirs."""
        fact_id = int(value.strip()) if FACT_ID.fullmatch(value.strip()) else None
        if fact_id is None:
            log.info("user %s asked to forget a fact that is not theirs or does not exist", user_id)
            return None
        return await self.forgetting.fact(user_id, fact_id)

    async def forget_fact(self, user_id: int, fact_id: int) -> str:
        traces = await self.forgetting.forget_fact(user_id, fact_id)
        return self.words("memory.not_found") if traces is None else forgot_fact_text(traces, self.words)

    async def confirm_conversation_text(self, user_id: int, value: str) -> tuple[Conversation | None, str]:
        """The question before forgetting the member's call or chat ``value``, saying what goes (the
        conversation, or None with what to say instead)."""
        convo = parse_conversation(value)
        found = "not_found" if convo is None else await self.forgetting.preview_conversation(user_id, convo)
        if isinstance(found, str):
            return None, self.words(REFUSED[found])
        forgettable, preview = found
        return forgettable.conversation, confirm_conversation_text(
            forgettable.conversation.kind, forgettable.started_at, preview, self.words
        )

    async def forget_conversation(self, user_id: int, value: str) -> str:
        convo = parse_conversation(value)
        done = "not_found" if convo is None else await self.forgetting.forget_conversation(user_id, convo)
        if isinstance(done, str):
            return self.words(REFUSED[done])
        forgotten, result = done
        return forgot_conversation_text(forgotten.conversation.kind, forgotten.started_at, result, self.words)

    async def forget_everything(self, user_id: int) -> str:
        return forgot_everything_text(await self.forgetting.forget_everything(user_id), self.words)

    async def confirm_text(self, user_id: int) -> str:
        everything = await self.forgetting.everything(user_id)
        facts, conversations, words = everything.facts, everything.conversations, self.words
        what = ","
        if facts or conversations:
            what = words(
                "memory.confirm_everything.what",
                facts=words.count("count.fact", facts),
                conversations=words.count("count.call_or_chat", conversations),
            )
        return words("memory.confirm_everything", what=what)


After = Callable[[], Awaitable[None]] | None


async def forget_fact_or_ask(
    actions: MemoryActions,
    interaction: discord.Interaction,
    value: str,
    *,
    after: After = None,
    in_place: bool,
) -> None:
    """Forget a fact at once when it is all that goes; otherwise ask first, saying what else goes with it.
    ``interaction`` is already acknowledged (deferred). ``in_place``: answer by editing the clicked message (the
    picker) rather than with a new message."""
    owner = interaction.user.id
    traces = await actions.fact_traces(owner, value)
    if traces is not None and traces.removes_more:
        confirm = ConfirmFactView(actions, owner, traces.fact.fact_id, after=after)
        question = confirm_fact_text(traces, actions.words)
        if in_place:
            await confirm.replace(interaction, content=question)
        else:
            await confirm.send_followup(interaction, question, allowed_mentions=NO_MENTIONS)
        return
    if traces is None:
        text = actions.words("memory.not_found")
    else:
        text = await actions.forget_fact(owner, traces.fact.fact_id)
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
    acknowledged (deferred); ``in_place`` as in ``forget_fact_or_ask``."""
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


# ---- views ---------------------------------------------------------------------------------------------


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
            await forget_fact_or_ask(actions, interaction, value.removeprefix("fact:"), after=after, in_place=True)
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


PERSISTENT_CONTROLS: tuple[type[discord.ui.DynamicItem[Any]], ...] = (
    PanelButton,
    PickSelect,
    EverythingButton,
    CancelButton,
    ConfirmEverythingButton,
    ConfirmFactButton,
    ConfirmConversationButton,
    *EDIT_CONTROLS,
)
"""Registered by the memory cog, so a click on any of them is handled whatever process sent the message."""
