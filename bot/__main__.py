"""Command line: `python -m bot run | check | migrate | copy-db | sync | export-user | forget-user |
import-history | context`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from bot.config import ConfigError, load_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bot", description="A Discord bot whose voice agent remembers you.")
    parser.add_argument("--config", type=Path, help="path to config.toml (default: ./config.toml or $BOT_CONFIG)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("run", help="run the bot")
    sub.add_parser("check", help="check configuration, database and services, then exit")
    sub.add_parser("migrate", help="create or upgrade the database schema")
    copy = sub.add_parser("copy-db", help="copy a whole database to another backend and prove the copy")
    copy.add_argument("--from", dest="source", required=True, help="postgresql://… or sqlite:///path/to/bot.db")
    copy.add_argument("--to", dest="target", required=True, help="an empty database: postgresql://… or sqlite:///…")
    sync = sub.add_parser("sync", help="register the slash commands with Discord")
    sync.add_argument("--guild", type=int, help="sync to one server only (takes effect at once)")
    export = sub.add_parser("export-user", help="print everything stored about a user as JSON")
    export.add_argument("user_id", type=int)
    forget = sub.add_parser("forget-user", help="delete everything stored about a user")
    forget.add_argument("user_id", type=int)
    imp = sub.add_parser("import-history", help="store finished conversations for a user as calls")
    imp.add_argument("user_id", type=int)
    imp.add_argument("file", type=Path)
    ctx = sub.add_parser("context", help="print the system messages the agent would get for this user")
    ctx.add_argument("user_id", type=int)
    ctx.add_argument("--query", help="a message, to print the context selected for it (as text chat does)")
    ctx.add_argument("--budget", type=int, help="memory budget in tokens (default: memory.context_budget_tokens)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    from bot import cli

    handlers = {
        "run": cli.run,
        "check": cli.check,
        "migrate": cli.migrate,
        "copy-db": cli.copy_db,
        "sync": cli.sync,
        "export-user": cli.export_user,
        "forget-user": cli.forget_user,
        "import-history": cli.import_history,
        "context": cli.context,
    }
    try:
        return asyncio.run(handlers[args.command](settings, args))
    except KeyboardInterrupt:
        return 130
    except cli.CommandFailed as exc:
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
