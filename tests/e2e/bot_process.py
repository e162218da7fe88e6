"""The real bot in a process of its own, against loopback fakes, so a test can SIGKILL it mid-call.

``python -m tests.e2e.bot_process <Discord REST base URL> <gateway URL>``: points discord.py at the fake Discord
(what ``FakeDiscord.patch`` does in-process), reads settings and sets up the log the way ``python -m bot run`` does
(``BOT_CONFIG`` and the environment) and runs ``bot.client.run_bot``."""

from __future__ import annotations

import asyncio
import sys

import discord
import yarl

from bot.client import run_bot
from bot.config import load_settings
from bot.logs import setup_logging


def main(argv: list[str]) -> int:
    rest, gateway = argv
    discord.http.Route.BASE = rest  # type: ignore[misc]
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway)
    settings = load_settings(load_dotenv_file=False)
    setup_logging(  # as `python -m bot` does: the test reads the log an operator would
        level=settings.log.level,
        fmt=settings.log.format,
        third_party_level=settings.log.third_party_level,
        secrets=settings.secret_values(),
    )
    return asyncio.run(run_bot(settings))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
