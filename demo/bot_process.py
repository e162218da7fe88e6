"""``python -m demo.bot_process <Discord REST base URL> <gateway URL>``: ``python -m bot run`` against the fake Discord.

discord.py has no setting for Discord's address, so this points its REST base and gateway at the fake (what
``FakeDiscord.patch`` does in tests) and then runs the bot's own command line, ``run``, unchanged: settings from
``BOT_CONFIG`` and the environment, the same start-up checks, signals and shutdown as in production."""

from __future__ import annotations

import sys

import discord
import yarl


def main(argv: list[str]) -> int:
    rest, gateway = argv
    discord.http.Route.BASE = rest
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway)
    from bot.__main__ import main as bot_main

    return bot_main(["run"])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
