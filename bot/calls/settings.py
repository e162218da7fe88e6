"""Per-server settings that admins change with `/settings`: what may be set, within which ranges, and the
overview the command shows. Changes are stored per server and apply to the next call started there.

No Discord types here: the cog parses the interaction and renders text, this module decides."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from bot.calls.language import LANGUAGES
from bot.calls.service import CallService, GuildUsage
from bot.config import Settings
from bot.store.models import GuildSettings

PERSONA_MAX_CHARS = 1500
GREETING_MAX_CHARS = 300
MAX_MINUTES_RANGE = (1, 240)
DAILY_CALLS_RANGE = (1, 500)
RETENTION_DAYS_RANGE = (0, 3650)
"""0 days = keep transcripts until members delete them (no automatic purge)."""


class InvalidSetting(ValueError):
    """A value outside what a server may set. Discord's option limits stop these before they reach us;
    this is the check for every other caller."""

    def __init__(self, name: str, detail: str):
        super().__init__(f"{name}: {detail}")
        self.name = name
        self.detail = detail


@dataclass(frozen=True)
class SettingsOverview:
    """A server's settings next to the bot-wide defaults they override, and today's usage."""

    settings: GuildSettings
    default_persona: str
    default_greeting: str
    default_max_minutes: int
    default_daily_calls: int
    usage: GuildUsage | None
    """None when voice calls are not configured on this bot."""

    @property
    def max_minutes(self) -> int:
        return self.settings.max_call_minutes or self.default_max_minutes

    @property
    def daily_calls(self) -> int:
        return self.settings.calls_per_member_per_day or self.default_daily_calls


def _text_or_default(name: str, text: str | None, limit: int) -> str | None:
    """Trimmed text, or None (the bot-wide default) when blank."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    if len(text) > limit:
        raise InvalidSetting(name, f"at most {limit} characters, got {len(text)}")
    return text


def _in_range(name: str, value: int, bounds: tuple[int, int]) -> int:
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidSetting(name, f"must be a whole number from {low} to {high}, got {value!r}")
    return value


class SettingsStore(Protocol):
    """What the server settings read and change."""

    async def get_guild_settings(self, guild_id: int) -> GuildSettings: ...
    async def update_guild_settings(self, guild_id: int, at: float, **changes: Any) -> GuildSettings: ...


class GuildSettingsService:
    def __init__(
        self,
        store: SettingsStore,
        settings: Settings,
        calls: CallService | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.settings = settings
        self.calls = calls
        self.clock = clock

    async def overview(self, guild_id: int) -> SettingsOverview:
        current = await self.store.get_guild_settings(guild_id)
        usage = await self.calls.usage_today(guild_id) if self.calls is not None else None
        return SettingsOverview(
            settings=current,
            default_persona=self.settings.memory.persona,
            default_greeting=self.settings.agora.greeting,
            default_max_minutes=self.settings.calls.max_minutes,
            default_daily_calls=self.settings.calls.calls_per_member_per_day,
            usage=usage,
        )

    async def _update(self, guild_id: int, **changes: object) -> GuildSettings:
        return await self.store.update_guild_settings(guild_id, self.clock(), **changes)

    async def set_calls_enabled(self, guild_id: int, enabled: bool) -> GuildSettings:
        return await self._update(guild_id, calls_enabled=bool(enabled))

    async def set_personal_greetings(self, guild_id: int, enabled: bool) -> GuildSettings:
        """Off: every call here opens with the server's greeting (`bot.memory.greeting`)."""
        return await self._update(guild_id, personal_greetings=bool(enabled))

    async def set_persona(self, guild_id: int, text: str | None) -> GuildSettings:
        """Blank or None restores the bot-wide persona."""
        return await self._update(guild_id, persona=_text_or_default("persona", text, PERSONA_MAX_CHARS))

    async def set_greeting(self, guild_id: int, text: str | None) -> GuildSettings:
        """Blank or None restores the bot-wide greeting."""
        return await self._update(guild_id, greeting=_text_or_default("greeting", text, GREETING_MAX_CHARS))

    async def set_max_minutes(self, guild_id: int, minutes: int) -> GuildSettings:
        return await self._update(guild_id, max_call_minutes=_in_range("max-minutes", minutes, MAX_MINUTES_RANGE))

    async def set_daily_calls(self, guild_id: int, count: int) -> GuildSettings:
        return await self._update(guild_id, calls_per_member_per_day=_in_range("daily-calls", count, DAILY_CALLS_RANGE))

    async def set_language(self, guild_id: int, language: str | None) -> GuildSettings:
        """The language of calls here for members who chose none and whose Discord language calls cannot be held
        in (`bot.calls.language`); None restores English."""
        if language is not None and language not in LANGUAGES:
            raise InvalidSetting("language", f"must be one of {', '.join(sorted(LANGUAGES))}, got {language!r}")
        return await self._update(guild_id, language=language)

    async def set_retention(self, guild_id: int, days: int) -> GuildSettings:
        """Days after which transcripts of calls and chats started here are deleted; 0 keeps them."""
        return await self._update(guild_id, retention_days=_in_range("retention", days, RETENTION_DAYS_RANGE))
