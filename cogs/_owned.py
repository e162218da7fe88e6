"""Member-owned messages: the one owner-only view base class and the owner-checked persistent controls.

Every control a member may still press after the bot restarts is a discord.py ``DynamicItem``: its state (owner,
page, call...) is in its ``custom_id``, so any process can handle a click on a message an earlier process sent.
While a message's view is alive in this process, a click reaches that view (``OwnedView.live``), which keeps
what cannot travel in a ``custom_id`` (what to refresh afterwards, a message waiting for a memory choice); after
a restart the control rebuilds what it needs from its ``custom_id`` and the store.
"""

from __future__ import annotations

import logging
import re
import weakref
from typing import Any, ClassVar, Self

import discord

from bot.client import FunnelledView, MemoryBot, report_error
from bot.translator import words_of

log = logging.getLogger(__name__)

NOT_YOURS = "owned.not_yours"
"""The catalogue key of what someone else who clicks a member's control reads, in their own language."""

_live_views: weakref.WeakKeyDictionary[discord.Client, dict[int, OwnedView]] = weakref.WeakKeyDictionary()


class OwnedView(FunnelledView):
    """A view only its owner may use. ``handle`` edits its message outside a click on it (timeouts, refreshes):
    an interaction whose original response is that message, or the followup message itself."""

    not_yours: ClassVar[str] = NOT_YOURS

    def __init__(self, owner_id: int, *, timeout: float | None):
        super().__init__(timeout=timeout)
        self.owner_id = owner_id
        self.handle: discord.Interaction | discord.Message | discord.WebhookMessage | None = None
        self._where: tuple[discord.Client, int] | None = None

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        return await owner_check(interaction, self.owner_id, self.not_yours)

    # ---- the live view of a message, for clicks on its persistent controls ---------------------------------

    def attach(self, client: discord.Client, message_id: int | None) -> None:
        """Record that this view is the live one of ``message_id`` (clicks on its controls come here)."""
        if message_id is None:
            return
        views = _live_views.setdefault(client, {})
        for stale in [mid for mid, view in views.items() if view.is_finished()]:
            del views[stale]  # timed out: discord.py finishes a view without calling stop()
        previous = views.get(message_id)
        if previous is not None and previous is not self:
            previous.stop()  # a newer view now shows on that message: the old one must not time out over it
        views[message_id] = self
        self._where = (client, message_id)

    @classmethod
    def live(cls, interaction: discord.Interaction) -> Self | None:
        """The live view of the clicked message in this process, if it is one of ``cls``."""
        if interaction.message is None:
            return None
        view = _live_views.get(interaction.client, {}).get(interaction.message.id)
        return view if isinstance(view, cls) and not view.is_finished() else None

    def stop(self) -> None:
        super().stop()
        if self._where is not None:
            client, message_id = self._where
            views = _live_views.get(client, {})
            if views.get(message_id) is self:
                del views[message_id]
            self._where = None

    # ---- editing its message -------------------------------------------------------------------------------

    def disable_all(self) -> None:
        for item in self.children:
            if isinstance(item, discord.ui.DynamicItem):
                item = item.item
            if isinstance(item, discord.ui.Button | discord.ui.Select):
                item.disabled = True

    async def edit(self, **changes: Any) -> None:
        """Edit this view's message, if Discord still allows it (ephemeral messages: 15 minutes)."""
        handle = self.handle
        try:
            if isinstance(handle, discord.Interaction):
                if not handle.is_expired():
                    await handle.edit_original_response(**changes)
            elif handle is not None:
                await handle.edit(**changes)
        except discord.HTTPException as exc:
            log.info("could not edit a message of user %s (HTTP %s)", self.owner_id, exc.status)

    async def send(self, interaction: discord.Interaction, content: str | None = None, **kwargs: Any) -> None:
        """Answer a command that was deferred ephemerally (``defer(ephemeral=True, thinking=True)``, before any
        database read) with this view: its "thinking…" message becomes this view's message."""
        message = await interaction.edit_original_response(content=content, view=self, **kwargs)
        self.handle = interaction
        self.attach(interaction.client, message.id)

    async def send_followup(
        self,
        interaction: discord.Interaction,
        content: str,
        *,
        allowed_mentions: discord.AllowedMentions = discord.utils.MISSING,
    ) -> None:
        """Send this view in an ephemeral followup of an acknowledged ``interaction``."""
        message = await interaction.followup.send(
            content, view=self, ephemeral=True, wait=True, allowed_mentions=allowed_mentions
        )
        self.handle = message
        self.attach(interaction.client, message.id)

    async def replace(self, interaction: discord.Interaction, **changes: Any) -> None:
        """Answer a click on a message by showing this view on it. The click was acknowledged first
        (``interaction.response.defer()``, before any database read), so this edits the clicked message."""
        await interaction.edit_original_response(view=self, **changes)
        self.handle = interaction
        if interaction.message is not None:
            self.attach(interaction.client, interaction.message.id)


async def owner_check(interaction: discord.Interaction, owner_id: int, not_yours: str = NOT_YOURS) -> bool:
    """Whether the owner clicked; anyone else is told ``not_yours`` (a catalogue key) in their own language."""
    if interaction.user.id == owner_id:
        return True
    await interaction.response.send_message(words_of(interaction)(not_yours), ephemeral=True)
    return False


class OwnedControl:
    """Mixed into every ``DynamicItem`` of a member-owned message: the owner (``(?P<owner>[0-9]+)`` in the
    template) is checked before anything runs, and failures go through the bot's one error funnel (discord.py
    would only log them for dynamic items)."""

    owner_id: int
    not_yours: ClassVar[str] = NOT_YOURS

    def __init__(self, item: Any, owner_id: int) -> None:
        super().__init__(item)  # type: ignore[call-arg]  # the DynamicItem this is mixed into
        self.owner_id = owner_id

    @classmethod
    def state_from(cls, match: re.Match[str]) -> dict[str, Any]:
        """The constructor's keyword arguments besides the component, read from a matching ``custom_id``."""
        return {"owner_id": owner_of(match)}

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str], /
    ) -> Self:
        return cls(item, **cls.state_from(match))

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        return await owner_check(interaction, self.owner_id, self.not_yours)

    async def callback(self, interaction: discord.Interaction) -> None:
        try:
            await self.run(interaction)
        except Exception as error:
            await report_error(interaction, error)

    async def run(self, interaction: discord.Interaction) -> None:
        raise NotImplementedError


def bot_of(interaction: discord.Interaction) -> MemoryBot:
    client = interaction.client
    if not isinstance(client, MemoryBot):
        raise TypeError("member-owned controls run only in the memory bot")
    return client


def owner_of(match: re.Match[str]) -> int:
    return int(match["owner"])
