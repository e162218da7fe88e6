"""The command-line actions behind `python -m bot`. Each returns the process exit status."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import urlsplit

from bot.app import open_services
from bot.config import Settings, all_settings, env_name
from bot.memory.importer import ImportFormatError, import_conversations, parse_conversations
from bot.messages import plural
from bot.store.copy import CopyFailed, copy_database, describe, store_for_url
from bot.store.repository import SchemaTooNew


class CommandFailed(Exception):
    """A command could not do its job; the message says what to fix."""


REQUIRED_TO_START = {
    ("discord", "token"): "the bot cannot log in to Discord",
    ("agora", "app_id"): "voice calls cannot start",
    ("agora", "app_certificate"): "voice calls cannot start (tokens cannot be minted)",
    ("agora", "customer_id"): "the bot cannot call Agora's REST API",
    ("agora", "customer_secret"): "the bot cannot call Agora's REST API",
}
RECOMMENDED = {
    (
        "web",
        "link_signing_key",
    ): "call links are hashed with a per-process random key; they stop working on restart",
    ("agora", "webhook_secret"): "Agora's history webhook is refused, so a call ended by idle timeout keeps "
    "only what the last checkpoint saw",
    ("llm", "base_url"): "no fact extraction, summaries or text chat; calls still remember transcripts",
}


def _value(settings: Settings, section: str, key: str) -> Any:
    return getattr(getattr(settings, section), key)


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def missing_required(settings: Settings) -> list[str]:
    return [
        f"{section}.{key} ({env_name(section, key)}): {why}"
        for (section, key), why in REQUIRED_TO_START.items()
        if not _value(settings, section, key)
    ]


async def run(settings: Settings, args: argparse.Namespace) -> int:
    missing = missing_required(settings)
    if missing:
        _out("The bot cannot start yet. Set these settings (secrets in .env or the environment):")
        for line in missing:
            _out(f"  - {line}")
        _out("Then run `python -m bot check` to verify everything.")
        return 2
    from bot.client import run_bot

    return await run_bot(settings)


async def check(settings: Settings, args: argparse.Namespace) -> int:
    ok = True
    _out("Settings")
    for section, key, _default, _secret in all_settings():
        if (section, key) in REQUIRED_TO_START or (section, key) in RECOMMENDED:
            present = bool(_value(settings, section, key))
            label = f"{section}.{key} ({env_name(section, key)})"
            if present:
                _out(f"  ok       {label} is set")
            elif (section, key) in REQUIRED_TO_START:
                ok = False
                _out(f"  MISSING  {label}: {REQUIRED_TO_START[(section, key)]}")
            else:
                _out(f"  warning  {label} is not set: {RECOMMENDED[(section, key)]}")

    public = urlsplit(settings.web.public_url)
    if public.scheme != "https" and public.hostname not in ("localhost", "127.0.0.1", "::1"):
        _out(
            f"  warning  web.public_url (WEB_PUBLIC_URL) is {settings.web.public_url}: browsers allow the microphone "
            "only over HTTPS, so put the call page behind a TLS proxy and use its https:// address"
        )

    _out("Database")
    try:
        async with open_services(settings) as services:
            version = await services.store.schema_version()
            _out(f"  ok       {settings.memory.database_path} is reachable and migrated (schema {version})")
    except SchemaTooNew as exc:
        ok = False
        _out(f"  FAIL     {exc}")
    except OSError as exc:
        ok = False
        _out(f"  FAIL     memory.database_path {settings.memory.database_path}: {exc}")
    except Exception as exc:  # any driver error is reported, not raised: this is a doctor
        ok = False
        _out(f"  FAIL     memory.database_path {settings.memory.database_path}: {type(exc).__name__}: {exc}")

    _out("Agora")
    if settings.agora_configured:
        from bot.agora import AgoraError, ConvoAIClient

        client = ConvoAIClient(
            base_url=settings.agora.api_base_url,
            app_id=settings.agora.app_id or "",
            customer_id=settings.agora.customer_id.get_secret_value() if settings.agora.customer_id else "",
            customer_secret=settings.agora.customer_secret.get_secret_value() if settings.agora.customer_secret else "",
            timeout=settings.agora.request_timeout_seconds,
            max_retries=0,
        )
        try:
            await client.ping()
            _out(f"  ok       {settings.agora.api_base_url} answers with these credentials")
        except AgoraError as exc:
            ok = False
            _out(f"  FAIL     agora.api_base_url {settings.agora.api_base_url}: {exc}")
        finally:
            await client.aclose()
    else:
        _out("  skipped  Agora credentials are not all set (see above)")

    _out("LLM")
    if settings.llm.enabled:
        from bot.llm import LLMClient, LLMError

        llm = LLMClient(
            base_url=settings.llm.base_url or "",
            model=settings.llm.model,
            api_key=settings.llm.api_key.get_secret_value() if settings.llm.api_key else None,
            timeout=settings.llm.timeout_seconds,
            max_retries=0,
        )
        try:
            await llm.ping()
            _out(f"  ok       {settings.llm.base_url} answers (model {settings.llm.model})")
        except LLMError as exc:
            _out(f"  warning  llm.base_url {settings.llm.base_url}: {exc} (calls still work; memory learns no facts)")
        finally:
            await llm.aclose()
    else:
        _out("  off      llm.base_url is not set: no fact extraction, summaries or text chat; calls still work")

    _out()
    _out("Ready to run." if ok else "The bot cannot start until the problems above are fixed.")
    return 0 if ok else 1


def database_label(settings: Settings) -> str:
    """The database in use, for messages (a PostgreSQL URL without its password)."""
    if settings.memory.database_url is not None:
        return describe(settings.memory.database_url.get_secret_value())
    return str(settings.memory.database_path)


async def migrate(settings: Settings, args: argparse.Namespace) -> int:
    try:
        async with open_services(settings) as services:
            _out(f"Database {database_label(settings)} is at schema {await services.store.schema_version()}.")
    except SchemaTooNew as exc:
        raise CommandFailed(str(exc)) from exc
    return 0


async def copy_db(settings: Settings, args: argparse.Namespace) -> int:
    """Copy a whole database to another (either backend), then compare every member's export on both sides."""
    try:
        source, target = store_for_url(args.source), store_for_url(args.target)
        await source.open()
        try:
            await target.open()
            try:
                report = await copy_database(source, target)
            finally:
                await target.close()
        finally:
            await source.close()
    except (CopyFailed, SchemaTooNew) as exc:
        raise CommandFailed(f"copy-db: {exc}") from exc
    rows = ", ".join(f"{table} {count}" for table, count in report.rows.items())
    _out(f"Copied {describe(args.source)} to {describe(args.target)}: {rows}.")
    _out(f"Every member's export is identical on both sides ({report.members} members).")
    return 0


async def sync(settings: Settings, args: argparse.Namespace) -> int:
    if not settings.discord.token:
        raise CommandFailed("Set DISCORD_TOKEN (in .env or the environment) to sync slash commands.")
    from bot.client import sync_commands

    count = await sync_commands(settings, guild_id=args.guild)
    where = f"server {args.guild}" if args.guild else "all servers (may take up to an hour to appear)"
    _out(f"Synced {count} commands to {where}.")
    return 0


async def export_user(settings: Settings, args: argparse.Namespace) -> int:
    async with open_services(settings) as services:
        data = await services.memory.export(args.user_id)
    _out(json.dumps(data, indent=2, ensure_ascii=False))
    return 0


async def forget_user(settings: Settings, args: argparse.Namespace) -> int:
    async with open_services(settings) as services:
        result = await services.memory.forget_everything(args.user_id)
        await services.memory.wait_scrubbed()
    _out(
        f"Forgot user {args.user_id}: {plural(result.calls, 'call')}, {plural(result.chats, 'chat')}, "
        f"{plural(result.turns, 'line')}, {plural(result.facts, 'fact')}."
    )
    return 0


async def import_history(settings: Settings, args: argparse.Namespace) -> int:
    try:
        data = json.loads(args.file.read_text(encoding="utf-8"))
        conversations = parse_conversations(data)
    except FileNotFoundError as exc:
        raise CommandFailed(f"{args.file} does not exist") from exc
    except json.JSONDecodeError as exc:
        raise CommandFailed(f"{args.file} is not valid JSON: {exc}") from exc
    except ImportFormatError as exc:
        raise CommandFailed(f"{args.file}: {exc}") from exc
    async with open_services(settings) as services:
        call_ids = await import_conversations(services.store, services.memory, args.user_id, conversations)
    turns = sum(len(c.messages) for c in conversations)
    _out(f"Imported {len(call_ids)} conversation(s), {turns} messages, for user {args.user_id}.")
    return 0


async def context(settings: Settings, args: argparse.Namespace) -> int:
    async with open_services(settings) as services:
        messages = await services.memory.build_context(args.user_id, budget_tokens=args.budget, query=args.query)
    _out(json.dumps(messages, indent=2, ensure_ascii=False))
    return 0
