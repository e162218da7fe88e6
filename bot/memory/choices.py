"""The member's memory choice and pause: whether to ask first, what answering the choice saves, what pausing and
resuming change. `/call`, `/chat`, direct messages and the `/memory` panel apply these rules, never their own.

A member answers the choice once (**Remember me** or without memory); it is asked again only after they forgot
everything. Pausing keeps the choice and stops memory being read or written; resuming is choosing **Remember me**
again, so calls remember too. Each change is stamped with the injected clock."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from bot.memory.locales import MemberLocales
from bot.store.models import UserRecord, needs_consent

log = logging.getLogger(__name__)


class ChoiceStore(Protocol):
    """The member's row, where their choice and pause are kept."""

    async def get_user(self, user_id: int) -> UserRecord | None: ...
    async def set_consent(self, user_id: int, remember: bool, at: float) -> UserRecord: ...
    async def set_memory_enabled(self, user_id: int, enabled: bool, at: float) -> UserRecord: ...
    async def set_user_language(self, user_id: int, language: str | None, at: float) -> UserRecord: ...
    async def set_personal_greetings(self, user_id: int, enabled: bool, at: float) -> UserRecord: ...


def chat_privately(user: UserRecord | None) -> bool | None:
    """Whether a chat answers without memory given the member's standing choice; None when they must be asked
    first. A paused memory is no reason to ask: the chat service then neither reads nor stores."""
    if user is not None and not user.memory_enabled:
        return False
    if user is None or needs_consent(user):
        return None
    return user.consent != "remember"


class MemberChoices:
    def __init__(
        self, store: ChoiceStore, *, clock: Callable[[], float] = time.time, locales: MemberLocales | None = None
    ) -> None:
        self.store = store
        self.clock = clock
        self.locales = locales
        """Told when a member chooses to be remembered, so their Discord locale is kept from then on."""

    async def must_ask(self, user_id: int) -> bool:
        """A call that would remember the member waits for their choice while they have not made one."""
        return needs_consent(await self.store.get_user(user_id))

    async def chat_privately(self, user_id: int) -> bool | None:
        """See `chat_privately`: whether the member's chat answers without memory, None to ask first."""
        return chat_privately(await self.store.get_user(user_id))

    async def choose(self, user_id: int, remember: bool) -> None:
        """The member answered the memory choice: **Remember me** (``remember``) or without memory."""
        await self.store.set_consent(user_id, remember, self.clock())
        if remember and self.locales is not None:
            await self.locales.now_remembered(user_id)
        log.info("user %s chose %s", user_id, "to be remembered" if remember else "no memory")

    async def set_remembering(self, user_id: int, on: bool) -> None:
        """Pause (``on`` False) keeps the member's choice; resume is choosing **Remember me** again."""
        if on:
            await self.store.set_consent(user_id, True, self.clock())
            if self.locales is not None:
                await self.locales.now_remembered(user_id)
        else:
            await self.store.set_memory_enabled(user_id, False, self.clock())
        log.info("user %s %s their memory", user_id, "resumed" if on else "paused")

    async def set_personal_greetings(self, user_id: int, on: bool) -> None:
        """Whether the member's calls open with a greeting of their own (``bot.memory.greeting``); off, the one
        prepared is deleted and their calls open with the server's greeting."""
        await self.store.set_personal_greetings(user_id, on, self.clock())
        log.info("user %s turned personal greetings %s", user_id, "on" if on else "off")

    async def set_call_language(self, user_id: int, language: str | None) -> None:
        """The language the member wants their calls in (a code of ``bot.calls.language.LANGUAGES``); None goes
        back to their Discord language. Kept with their choices, so ``/forget everything`` drops it too."""
        await self.store.set_user_language(user_id, language, self.clock())
        log.info("user %s chose calls in %s", user_id, language or "their Discord language")
