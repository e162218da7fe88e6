"""The command-line actions behind `python -m bot`. Each returns the process exit status."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from bot.app import (
    build_agora_client,
    build_embedding_client,
    build_llm_client,
    build_store,
    database_use,
    open_services,
)
from bot.calls.language import ENGLISH, supported, supported_report
from bot.config import Settings, all_settings, env_name
from bot.doctor import (
    UNUSABLE_DATABASE_EXIT,
    Finding,
    StartupProblem,
    database_folder_problem,
    inspect_configured_database,
    inspect_postgres,
    inspect_running_bot,
    startup_findings,
)
from bot.i18n import english
from bot.invocation import bot_command, keys_command
from bot.keys import MASTER_KEY_ENV, KeyStoreLocked, parse_master_key
from bot.keys.lost import half_forgotten_members, unreadable_members
from bot.keys.pg_store import residue_warnings
from bot.keys.setup import build_key_store, check_key_store, key_store_label
from bot.loop import loop_name
from bot.memory.embedded import available as embedded_model_installed
from bot.memory.importer import ImportFormatError, import_conversations, parse_conversations, pending_learning
from bot.memory.service import MemoryService
from bot.store.copy import CopyFailed, CopyReport, copy_database, describe, store_for_url
from bot.store.inuse import use_for_url
from bot.store.migrations import LATEST_VERSION
from bot.store.pg_migrations import PG_LATEST_VERSION
from bot.store.repository import SchemaTooNew, Store


class CommandFailed(Exception):
    """A command could not do its job; the message says what to fix. ``exit_status`` 2: a setting or a file to
    fix (an unusable database), which trying again cannot."""

    def __init__(self, text: str, *, exit_status: int = 1) -> None:
        super().__init__(text)
        self.exit_status = exit_status


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
    ): "call links are hashed with a per-process random key; they stop working on restart (create it with "
    + keys_command()
    + ")",
    ("agora", "webhook_secret"): "Agora's history webhook is refused, so a call ended by idle timeout keeps "
    "only what the last checkpoint saw",
    ("llm", "base_url"): "no fact extraction, summaries or text chat; calls still remember transcripts",
}


def _value(settings: Settings, section: str, key: str) -> Any:
    return getattr(getattr(settings, section), key)


def _counted(n: int, what: str) -> str:
    """ "1 call", "2 calls" in what the commands print: English, from the catalogue members read (``bot.i18n``)."""
    return english().count(f"count.{what}", n)


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def _finding(finding: Finding) -> None:
    _out(f"  {finding.level:<8} {finding.text}")


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
        _out(f"Then run `{bot_command('check')}` to verify everything.")
        return 2
    folder = (
        None if settings.memory.database_url is not None else database_folder_problem(settings.memory.database_path)
    )
    if folder is not None:  # a setting to change, not a fault that goes away: 2, which systemd does not restart
        print(f"The bot cannot start: {folder}", file=sys.stderr)
        return 2
    database, listen = startup_findings(settings)
    if database.failed:  # damaged, too new, not writable: restarting cannot fix it
        raise StartupProblem(database.text, exit_status=UNUSABLE_DATABASE_EXIT)
    if listen.failed:
        running = await _running_bot(settings)
        if running is not None and await inspect_running_bot(running, settings.web.host, settings.web.port):
            raise StartupProblem(
                f"{running} already runs with these settings and answers on {settings.web.host}:"
                f"{settings.web.port}: stop it before starting another (`{bot_command('check')}` shows its state)"
            )
        raise StartupProblem(listen.text)
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

    _out("Event loop")
    loop = loop_name()
    _out(f"  ok       {loop}" + ("" if loop == "uvloop" else " (uvloop is not installed on this platform)"))

    _out("Memory encryption")
    keys_ok = await _check_keys(settings)
    ok = keys_ok and ok

    if settings.discord.token:
        _out("Discord")
        discord_ok = await _check_discord(
            settings.discord.token.get_secret_value(), user_installs=settings.discord.user_installs
        )
        ok = ok and discord_ok

    database, listen = startup_findings(settings)
    if settings.memory.database_url is not None and not database.failed:
        database = await inspect_postgres(settings.memory.database_url.get_secret_value())
    running = None if database.failed else await _running_bot(settings)
    _out("Database (read only: check never creates or migrates it)")
    _finding(database)
    if running is not None:
        _out(f"  running  {running} uses it (its lock says so)")
        answer = await inspect_running_bot(running, settings.web.host, settings.web.port)
        if answer is not None and listen.failed:  # its own port, not a stranger's
            listen = answer
    ok = await _finish_forgets(settings, keys_ok and not database.failed) and ok
    _out("Web server")
    _finding(listen)
    ok = ok and not database.failed and not listen.failed

    _out("Agora")
    if settings.agora_configured:
        from bot.agora import AgoraError

        client = build_agora_client(settings, max_retries=0)
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
        from bot.llm import LLMError

        llm = build_llm_client(settings, max_retries=0)
        try:
            await llm.ping()
            _out(f"  ok       {settings.llm.base_url} answers (model {settings.llm.model})")
        except LLMError as exc:
            _out(f"  warning  llm.base_url {settings.llm.base_url}: {exc} (calls still work; memory learns no facts)")
        finally:
            await llm.aclose()
    else:
        _out("  off      llm.base_url is not set: no fact extraction, summaries or text chat; calls still work")

    _out("Dense retrieval")
    _out(f"  {'on ' if settings.embeddings_source else 'off'}      {settings.dense_retrieval_reason()}")
    if settings.embeddings_source == "embedded" and not embedded_model_installed():
        _out("  warning  the wordllama package is not installed: memory is searched by words (BM25) only")
    if settings.llm.dense_enabled:
        from bot.llm import LLMError

        embeddings = build_embedding_client(settings)
        try:
            dimensions = (await embeddings.embed(["check"])).shape[1]
            _out(f"  ok       {settings.llm.base_url}/embeddings answers ({dimensions} dimensions)")
        except LLMError as exc:
            _out(f"  warning  llm.embedding_model: {exc} (memory is searched with BM25 alone meanwhile)")
        finally:
            await embeddings.aclose()

    _out("Live recall")
    _out(f"  {'on ' if settings.live_recall_enabled else 'off'}      {settings.live_recall_reason()}")
    if settings.live_recall_enabled and public.scheme != "https":
        _out(
            f"  warning  web.public_url (WEB_PUBLIC_URL) is {settings.web.public_url}: Agora's servers must reach "
            "the bot's LLM route there; use the public https:// address of your TLS proxy"
        )

    _out("Call languages (agora.preset, agora.tts_vendor)")
    english_only = supported(settings.agora) == {ENGLISH}
    _out(f"  {'warning' if english_only else 'ok':<8} {supported_report(settings.agora)}")

    _out()
    if running is not None:
        _out(
            f"The bot is running ({running}); "
            + ("nothing above would stop it from starting again." if ok else "the problems above stop its next start.")
        )
    else:
        _out("Ready to run." if ok else "The bot cannot start until the problems above are fixed.")
    return 0 if ok else 1


async def _running_bot(settings: Settings) -> str | None:
    """Which bot process runs on the configured database now (its lock says), if one does."""
    try:
        return await database_use(settings).running()
    except (OSError, asyncpg.PostgresError):  # the database's own finding says why it cannot be reached
        return None


async def _finish_forgets(settings: Settings, usable: bool) -> bool:
    """Finishes the forgets of everything a kill left part-way (``bot.memory.forget_all``), the one write `check`
    makes, and only then: the member's writes stay refused until it is done. False when it cannot be done here."""
    try:
        members, version = await half_forgotten_members(settings.memory)
    except (OSError, asyncpg.PostgresError, sqlite3.Error):
        return True  # the database's own finding says what is wrong with it
    if not members:
        return True
    listed = ", ".join(str(m) for m in members)
    latest = LATEST_VERSION if settings.memory.database_url is None else PG_LATEST_VERSION
    if usable and version == latest:
        try:
            async with open_services(settings) as services:
                await services.memory.finish_interrupted_forgets()
        except Exception as exc:
            _out(f"  FAIL     the forget of member(s) {listed} was interrupted and could not be finished: {exc}")
        else:
            _out(f"  ok       finished the forget of member(s) {listed}, which had been interrupted part-way")
            return True
    else:
        _out(f"  FAIL     the forget of member(s) {listed} was interrupted part-way and is not finished")
    _out(
        f"           nothing of theirs is stored meanwhile: `{bot_command('forget-user ' + str(members[0]))}` (for "
        "each of them) or starting the bot finishes it"
    )
    return False


async def _check_keys(settings: Settings) -> bool:
    """Reports the master key and the key store; False when the bot could not start because of them."""
    where = key_store_label(settings.memory)
    label = f"memory.master_key ({MASTER_KEY_ENV})"
    try:
        count = await check_key_store(settings.memory)
    except (KeyStoreLocked, StartupProblem) as exc:
        _out(f"  FAIL     {exc}")
        return False
    except Exception as exc:  # a damaged or unreadable key store file is reported, not raised: this is a doctor
        _out(f"  FAIL     memory.key_store {where}: {type(exc).__name__}: {exc}")
        return False
    memory = "PostgreSQL" if settings.memory.database_url is not None else "SQLite"
    if settings.memory.master_key is None:
        _out(
            f"  warning  {label} is not set: members' memory ({memory}) is not encrypted and has no keys to shred. "
            f"Create it (and the link signing key) with {keys_command()}, and back the master key up apart from "
            "the database"
        )
    elif settings.memory.key_store_url is not None or settings.memory.key_store_path.exists():
        if settings.memory.key_store_url is not None:
            for warning in await residue_warnings(settings.memory.key_store_url.get_secret_value()):
                _out(f"  warning  memory.key_store_url: {warning}")
        _out(
            f"  ok       {label} is set and opens the key store {where} ({_counted(count, 'member_key')}); members' "
            f"memory ({memory}) is encrypted with their own keys"
        )
    else:
        _out(
            f"  ok       {label} is set; the key store {where} is created at start; members' memory ({memory}) is "
            "encrypted with their own keys"
        )
    return True


async def rotate_master_key(settings: Settings, args: argparse.Namespace) -> int:
    """Rewraps every member key from the current master key to MEMORY_NEW_MASTER_KEY; no memory row changes."""
    current = settings.memory.master_key_bytes()
    if current is None:
        raise CommandFailed(f"Set {MASTER_KEY_ENV} to the current master key before rotating it.")
    if settings.memory.new_master_key is None:
        raise CommandFailed(
            f"Set MEMORY_NEW_MASTER_KEY to the new master key (create one with `{bot_command('keygen')}`), "
            "then run rotate-master-key again."
        )
    new = parse_master_key(settings.memory.new_master_key.get_secret_value())
    if new == current:
        raise CommandFailed("MEMORY_NEW_MASTER_KEY is the current master key: create a new one with keygen.")
    async with database_use(settings).alone("rotate the master key"):  # a running bot wraps new keys with the old
        keys = build_key_store(settings.memory, current)
        await keys.open()
        try:
            count = await keys.rotate(new)
        finally:
            await keys.close()
    _out(f"Rewrapped {_counted(count, 'member_key')} in {key_store_label(settings.memory)} with the new master key.")
    _out(
        f"Now set {MASTER_KEY_ENV} to the value of MEMORY_NEW_MASTER_KEY in .env, remove MEMORY_NEW_MASTER_KEY, "
        "and restart the bot: the old master key no longer opens the key store."
    )
    return 0


def database_label(settings: Settings) -> str:
    """The database in use, for messages (a PostgreSQL URL without its password)."""
    if settings.memory.database_url is not None:
        return describe(settings.memory.database_url.get_secret_value())
    return str(settings.memory.database_path)


async def _check_discord(token: str, *, user_installs: bool) -> bool:
    import aiohttp
    import discord

    from bot.client import TOKEN_REFUSED, discord_identity
    from bot.invite import invite_url, user_install_url

    try:
        identity = await discord_identity(token)
    except discord.LoginFailure:
        _out(f"  FAIL     {TOKEN_REFUSED}")
        return False
    except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
        _out(f"  FAIL     Discord did not answer ({type(exc).__name__}): check this machine's internet connection")
        return False
    _out(f"  ok       logged in as {identity.user}")
    _out(f"  invite   {invite_url(identity.application_id)}  (a server admin adds the bot to the server)")
    if user_installs:
        _out(
            f"  invite   {user_install_url(identity.application_id)}  (a member adds it to their own account; "
            "enable User Install under Installation in the Developer Portal)"
        )
    else:
        _out("  off      discord.user_installs is false: members cannot add the bot to their own account")
    if identity.interactions_endpoint_url:
        _out(
            f"  FAIL     the application's Interactions Endpoint URL is set ({identity.interactions_endpoint_url}): "
            "Discord then sends slash commands there instead of to the bot; clear it in the Developer Portal "
            "(General Information)"
        )
        return False
    return True


async def migrate(settings: Settings, args: argparse.Namespace) -> int:
    database = inspect_configured_database(settings)
    if database.failed:
        raise CommandFailed(database.text)
    try:
        async with open_services(settings) as services:
            _out(f"Database {database_label(settings)} is at schema {await services.store.schema_version()}.")
            if services.keys is not None:
                _out(
                    f"Every member's memory is encrypted with their own key (key store {services.keys.label}, "
                    f"{_counted(await services.keys.count(), 'member_key')})."
                )
    except SchemaTooNew as exc:
        raise CommandFailed(str(exc)) from exc
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            raise
        raise CommandFailed(
            f"the database {settings.memory.database_path} stayed locked by another program for "
            f"{settings.memory.lock_timeout_seconds:g} s (memory.lock_timeout_seconds): stop the other writer "
            "(another copy of the bot, an sqlite3 shell) and run migrate again"
        ) from exc
    return 0


async def copy_db(settings: Settings, args: argparse.Namespace) -> int:
    """Copy a whole database to another (either backend), then compare every member's export on both sides."""
    try:
        source, target = store_for_url(args.source), store_for_url(args.target)
        async with use_for_url(args.target).alone(f"copy a database into {describe(args.target)}"):
            report = await _copy(source, target)
    except (CopyFailed, SchemaTooNew) as exc:
        raise CommandFailed(f"copy-db: {exc}") from exc
    except sqlite3.DatabaseError as exc:  # not the configured database: name the one given
        raise CommandFailed(
            f"copy-db: a SQLite database given is not usable ({exc}); check --from {describe(args.source)} and "
            f"--to {describe(args.target)}",
            exit_status=UNUSABLE_DATABASE_EXIT,
        ) from None
    rows = ", ".join(f"{table} {count}" for table, count in report.rows.items())
    _out(f"Copied {describe(args.source)} to {describe(args.target)}: {rows}.")
    _out(f"Every member's export is identical on both sides ({report.members} members).")
    return 0


async def _copy(source: Store, target: Store) -> CopyReport:
    await source.open()
    try:
        await target.open()
        try:
            return await copy_database(source, target)
        finally:
            await target.close()
    finally:
        await source.close()


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


FORGET_SCRUB_WAIT_SECONDS = 30.0
EXIT_NOT_SCRUBBED = 3


async def forget_user(settings: Settings, args: argparse.Namespace) -> int:
    async with open_services(settings) as services:
        result = await services.memory.forget_everything(args.user_id)
        finished = await services.memory.finish_interrupted_forgets()  # other members' a kill left part-way
        scrubbed = await services.memory.wait_scrubbed(within=FORGET_SCRUB_WAIT_SECONDS)
        if not scrubbed:
            await services.memory.stop_scrubbing()  # recorded: finished by the next forget-user or start
    _out(
        f"Forgot user {args.user_id}: {_counted(result.calls, 'call')}, {_counted(result.chats, 'chat')}, "
        f"{_counted(result.turns, 'line')}, {_counted(result.facts, 'fact')}."
    )
    if finished:
        _out(f"Also finished the forget of member(s) {', '.join(map(str, finished))}, interrupted part-way before.")
    if not scrubbed:
        _out(
            f"Not complete yet: the deleted text is still in {settings.memory.database_path} because another "
            "program holds it open (a backup, a database shell). Close that program, then run forget-user again "
            "or start the bot: the pending scrub is recorded and finished then."
        )
        return EXIT_NOT_SCRUBBED
    return 0


async def forget_unreadable(settings: Settings, args: argparse.Namespace) -> int:
    """Deletes the memory of members who have encrypted rows and no key in the key store (``bot.keys.lost``):
    what the operator does when those keys are truly lost, or after restoring a backup of the memory database
    taken before members were forgotten. Works on the memory database alone: the key store is not opened."""
    members = await unreadable_members(settings.memory, forgotten_too=True)
    where = key_store_label(settings.memory)
    if not members:
        _out(f"Every member with memory in {database_label(settings)} has a key in {where}: nothing to forget.")
        return 0
    listed = ", ".join(str(m) for m in members)
    if not args.yes:
        _out(f"{_counted(len(members), 'member')} with memory that no key in {where} opens: {listed}.")
        _out(
            f"If their keys are truly lost, run `{bot_command('forget-unreadable --yes')}` to delete it; otherwise "
            "restore the key store that belongs with this database."
        )
        return 1
    store = build_store(settings)  # the rows are deleted as they are: nothing of them needs opening
    await store.open()
    memory = MemoryService(
        store, budget_tokens=settings.memory.context_budget_tokens, persona=settings.memory.persona, read_ahead=False
    )
    try:
        for user_id in members:
            await memory.forget_everything(user_id)
        scrubbed = await memory.wait_scrubbed(within=FORGET_SCRUB_WAIT_SECONDS)
        await memory.stop_scrubbing()
    finally:
        await store.close()
    _out(f"Forgot the unreadable memory of {_counted(len(members), 'member')}: {listed}.")
    if not scrubbed:
        _out(f"Not complete yet: the deleted rows are still in {settings.memory.database_path}; start the bot.")
        return EXIT_NOT_SCRUBBED
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
        embedded = await services.embedder.embed_all(args.user_id) if services.embedder is not None else None
    turns = sum(len(c.messages) for c in conversations)
    _out(f"Imported {len(call_ids)} conversation(s), {turns} messages, for user {args.user_id}.")
    if embedded is not None:
        _out(f"Embedded {embedded} lines and facts for search by meaning.")
    return 0


async def context(settings: Settings, args: argparse.Namespace) -> int:
    async with open_services(settings) as services:
        messages = await services.memory.build_context(args.user_id, budget_tokens=args.budget, query=args.query)
        pending = await pending_learning(services.store, args.user_id)
    _out(json.dumps(messages, indent=2, ensure_ascii=False))
    if pending:
        print(
            f"Not learned from yet (facts and summaries come from the running bot's post-call jobs, with an LLM): "
            f"{', '.join(pending)}.",
            file=sys.stderr,
        )
    return 0
