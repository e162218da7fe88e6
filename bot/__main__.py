"""Command line: `python -m bot run | check | migrate | copy-db | sync | export-user | forget-user |
forget-unreadable | import-history | context | backup | restore | keygen | rotate-master-key` (and `--version`)."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from bot.invocation import bot_command, packages_missing

try:
    import asyncpg

    from bot import __version__
    from bot import loop as event_loop
    from bot.config import KEYGEN_HINT, ConfigError, Settings, load_settings
    from bot.doctor import UNUSABLE_DATABASE_EXIT, StartupProblem, inspect_configured_database
    from bot.keys import KeyStoreLocked
    from bot.keys.setup import check_key_store
    from bot.logs import setup_logging
    from bot.store.inuse import DatabaseInUse
except ModuleNotFoundError as missing:  # a Python without the bot's packages (e.g. `python -m bot` outside .venv)
    if __name__ != "__main__":
        raise
    print(packages_missing(missing, sys.argv[1:]), file=sys.stderr)
    sys.exit(2)

KEYS_NOT_REQUIRED = frozenset({"forget-unreadable", "backup", "restore", "copy-db", "rotate-master-key"})
"""Commands that run while encrypted members' keys are missing from the key store: they repair it or copy files."""
OPEN_THE_DATABASE = frozenset(
    {"migrate", "sync", "export-user", "forget-user", "forget-unreadable", "import-history", "context", "backup"}
)
"""Commands that open the configured database: a damaged or unusable one stops them with one line and exit 2 (as
`run`), before anything reads it. `check` reports it; `restore` is how to replace it."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bot", description="A Discord bot whose voice agent remembers you.")
    parser.add_argument("--config", type=Path, help="path to config.toml (default: ./config.toml or $BOT_CONFIG)")
    parser.add_argument("--version", action="version", version=f"memory-call-bot {__version__}")
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
    unreadable = sub.add_parser(
        "forget-unreadable", help="delete the memory of members whose keys are not in the key store (keys lost)"
    )
    unreadable.add_argument("--yes", action="store_true", help="delete it (without --yes, only list the members)")
    imp = sub.add_parser("import-history", help="store finished conversations for a user as calls")
    imp.add_argument("user_id", type=int)
    imp.add_argument("file", type=Path)
    backup = sub.add_parser(
        "backup", help="write one archive of the live database and the key store (the bot may keep running)"
    )
    backup.add_argument(
        "file",
        metavar="DESTINATION",
        help="a folder (created if missing; the archive is named with the date and time), FILE.tar.gz, or - for "
        "standard output; FILE.db copies the database alone",
    )
    restore = sub.add_parser(
        "restore", help="put back a backup archive (or database copy) in place of the database (stop the bot first)"
    )
    restore.add_argument("file", metavar="FILE", help="what backup wrote, or - to read it from standard input")
    ctx = sub.add_parser("context", help="print the system messages the agent would get for this user")
    ctx.add_argument("user_id", type=int)
    ctx.add_argument("--query", help="a message, to print the context selected for it (as text chat does)")
    ctx.add_argument("--budget", type=int, help="memory budget in tokens (default: memory.context_budget_tokens)")
    sub.add_parser("keygen", help="print a new master key for MEMORY_MASTER_KEY (on the last line)")
    sub.add_parser(
        "rotate-master-key",
        help="rewrap every member key from MEMORY_MASTER_KEY to MEMORY_NEW_MASTER_KEY (memory itself is untouched)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "keygen":  # needs no settings: it is how the first setting of a new install is made
        from bot.keys import MASTER_KEY_ENV, generate_master_key_text

        print(f"A new master key. Put it in .env as {MASTER_KEY_ENV}=<key> and keep a copy somewhere safe:")
        print(generate_master_key_text())
        return 0
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        if any(KEYGEN_HINT in problem for problem in exc.problems):
            print(f"Create a master key with: {bot_command('keygen')}", file=sys.stderr)
        return 2
    setup_logging(
        level=settings.log.level,
        fmt=settings.log.format,
        third_party_level=settings.log.third_party_level,
        secrets=settings.secret_values(),
    )
    from bot import backups, cli

    handlers = {
        "run": cli.run,
        "check": cli.check,
        "migrate": cli.migrate,
        "copy-db": cli.copy_db,
        "sync": cli.sync,
        "export-user": cli.export_user,
        "forget-user": cli.forget_user,
        "forget-unreadable": cli.forget_unreadable,
        "import-history": cli.import_history,
        "context": cli.context,
        "backup": backups.backup,
        "restore": backups.restore,
        "rotate-master-key": cli.rotate_master_key,
    }
    try:
        if args.command != "check":  # check reports it among everything else
            # Before anything opens the database (even to inspect it): member keys need their master key, and
            # encrypted members their keys (bot.keys.lost), except for the commands that repair that.
            event_loop.run(check_key_store(settings.memory, require_keys=args.command not in KEYS_NOT_REQUIRED))
        if args.command in OPEN_THE_DATABASE:
            database = inspect_configured_database(settings)
            if database.failed:
                print(database.text, file=sys.stderr)
                return UNUSABLE_DATABASE_EXIT
        return event_loop.run(handlers[args.command](settings, args))
    except KeyboardInterrupt:
        return 130
    except (cli.CommandFailed, DatabaseInUse) as exc:
        print(exc, file=sys.stderr)
        return exc.exit_status if isinstance(exc, cli.CommandFailed) else 1
    except StartupProblem as exc:
        print(f"The bot cannot start: {exc}", file=sys.stderr)
        return exc.exit_status
    except sqlite3.DatabaseError as exc:  # found while working, past the check before it
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            print(
                f"memory.database_path {settings.memory.database_path} stayed locked by another program for "
                f"{settings.memory.lock_timeout_seconds:g} s (memory.lock_timeout_seconds): try again",
                file=sys.stderr,
            )
            return 1
        print(unusable_sqlite(settings, exc), file=sys.stderr)
        return UNUSABLE_DATABASE_EXIT
    except (OSError, asyncpg.PostgresError) as exc:
        if settings.memory.database_url is None or isinstance(exc, FileNotFoundError | PermissionError):
            raise
        from bot.store.copy import describe

        where = describe(settings.memory.database_url.get_secret_value())
        print(f"memory.database_url {where}: {type(exc).__name__}: {exc}; is PostgreSQL running?", file=sys.stderr)
        return 1
    except KeyStoreLocked as exc:
        print(exc, file=sys.stderr)
        return 2


def unusable_sqlite(settings: Settings, exc: sqlite3.DatabaseError) -> str:
    return (
        f"memory.database_path {settings.memory.database_path} is not a usable SQLite database ({exc}): restore a "
        f"backup with `{bot_command('restore FILE')}`, or move the file away to start empty"
    )


if __name__ == "__main__":
    sys.exit(main())
