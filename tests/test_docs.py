"""The docs check: every command README.md and the operator guide show is run, either here as written (in a scratch
checkout, placeholders filled in) or by the test named for it, whose code is checked to run that command; the
Docker and systemd lines, which need a Docker daemon or systemd, are checked against deploy/ and the bot's own
command-line parser. The command-line table lists exactly the bot's commands, the figures "What it costs to run"
names are the code's (recounted with the bot's tokenizer), and every link between the pages reaches a heading."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest
import yaml
from dotenv import dotenv_values

from bot import __version__
from bot.__main__ import _parser
from bot.app import open_services
from bot.calls.agent import DEFAULT_LLM_PARAMS
from bot.calls.settings import DAILY_CALLS_RANGE, MAX_MINUTES_RANGE
from bot.config import DEFAULT_PERSONA, Settings
from bot.keys import parse_master_key
from bot.memory import chat, extraction, postcall, tools
from bot.memory.dense import MAX_EMBED_CHARS
from bot.memory.tokens import count_tokens
from standins.harness import make_settings

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/operator-guide.md")
PROGRAMS = ("python3 ", ".venv/bin/", "/opt/memory-call-bot/", "docker ", "sqlite3 ", "systemctl ", "sudo ")
PROGRAMS += ("curl ", "git ", "mkdir ")
TOOL_NAMES = {"docker compose", "pg_dump"}
"""Named in running text as tools ("add --profile postgres to the `docker compose` commands"), not as commands."""
COMPOSE = "docker compose --env-file .env -f deploy/compose.yaml"
RUN_IN_IMAGE = re.escape(COMPOSE) + " run --rm bot python"
USER_ID = "4242"
SAID = "My sister lives in Porto."


def commands_shown(page: str) -> list[str]:
    """Each line of the page's `sh` blocks (without its comment) and each code span that starts with a program."""
    text = (ROOT / page).read_text()
    found: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        found += [re.split(r"\s+#\s", line.strip())[0] for line in block.splitlines() if line.strip()]
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    found += [span for span in re.findall(r"`([^`\n]+)`", prose) if span.startswith(PROGRAMS)]
    found = [c.replace("docker compose ...", COMPOSE) for c in found]  # the guide's shorthand, defined at its top
    return list(dict.fromkeys(c for c in found if c not in TOOL_NAMES))


def command_line_table() -> list[str]:
    """The first column of README's command-line table."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### On the command line") :]
    table = section[section.index("| Command | What it does |") :].split("\n\n")[0]
    return [re.match(r"\| `([^`]+)`", line).group(1) for line in table.splitlines()[2:]]  # type: ignore[union-attr]


# ---- who runs what -------------------------------------------------------------------------------------------------

HERE = "run here as written"
DEPLOY = "checked against deploy/ and the bot's parser (no Docker daemon or systemd here)"
SYNOPSIS = "a form, its commands shown and run elsewhere"


def by(path: str, test: str, evidence: str) -> str:
    """The test `path::test`, whose code must hold `evidence` (the command as that test runs it)."""
    return f"{path}::{test} {evidence}"


COVERED: list[tuple[str, str]] = [
    (r"python3 tasks\.py run", HERE),
    (
        r"python3 tasks\.py keys",
        by(
            "tests/test_commands_as_written.py",
            "test_tasks_keys_writes_env_from_the_example_with_both_keys",
            '"tasks.py", "keys"',
        ),
    ),
    (r"python3 tasks\.py demo", by("tests/e2e/test_demo.py", "test_a_person_tries_the_bot_in_the_demo", "start_demo")),
    (
        r"python3 tasks\.py test",
        by(
            "tests/test_tasks_test.py",
            "test_the_whole_suite_runs_on_every_core_after_the_lint_gate",
            "run_test_command",
        ),
    ),
    (
        r"python3 tasks\.py test \S.*",
        by("tests/test_tasks_test.py", "test_arguments_after_test_go_to_pytest_as_given", "run_test_command"),
    ),
    (
        r"\.venv/bin/python -m bot run",
        by("tests/test_commands_as_written.py", "test_the_hint_run_prints_works_as_written", '"-m", "bot", "run"'),
    ),
    (
        r"\.venv/bin/python -m bot check",
        by("tests/test_commands_as_written.py", "test_the_hint_run_prints_works_as_written", "hint.group(1).split()"),
    ),
    (
        r"\.venv/bin/python -m bot sync --guild <server id>",
        by(
            "tests/e2e/test_smoke_real_entry_point.py",
            "test_sync_command_registers_commands_in_one_server",
            "sync_commands(settings, guild_id=",
        ),
    ),
    (
        r"\.venv/bin/python -m bot restore",
        by(
            "tests/test_backup.py",
            "test_backup_is_consistent_while_the_database_is_in_use_and_restore_brings_it_back",
            '"restore"',
        ),
    ),
    (
        r"\.venv/bin/python -m bot export-user",
        by("tests/test_cli.py", "test_import_then_context_then_export_then_forget", '"export-user"'),
    ),
    (r"\.venv/bin/python -m bot (backup|restore|keygen|rotate-master-key|forget-unreadable|--version)( \S+)*", HERE),
    (r"(mkdir -p|sqlite3|git pull)( .+)?", HERE),
    (r"curl -X POST https://<domain>/agora/webhook", HERE),
    (
        rf"(\.venv/bin/python|sudo -u memory-call-bot \.venv/bin/python|{RUN_IN_IMAGE}) -m bot"
        r"( \[--config FILE\])? COMMAND",
        SYNOPSIS,
    ),
    (re.escape(COMPOSE), SYNOPSIS),  # the guide's `docker compose ...`, which stands for it
    (re.escape(COMPOSE) + r" .+", DEPLOY),
    (r"sudo -u memory-call-bot \.venv/bin/python -m bot .+", DEPLOY),
    (r"systemctl (stop|restart) memory-call-bot", DEPLOY),
    (r"\.venv/bin/pip install \.", DEPLOY),
]

TABLE_COVERED: dict[str, str] = {
    "run": by("tests/test_commands_as_written.py", "test_the_hint_run_prints_works_as_written", '"-m", "bot", "run"'),
    "check": by("tests/test_cli.py", "test_check_reports_each_setting_and_the_database", '"check"'),
    "migrate": by("tests/test_cli.py", "test_migrate_creates_the_schema", '"migrate"'),
    "copy-db": by(
        "tests/store/test_copy.py", "test_sqlite_to_postgresql_and_back_gives_identical_exports", "await copy("
    ),
    "backup": by(
        "tests/test_backup.py",
        "test_the_readme_backup_makes_one_archive_that_restores_memory_and_member_keys_into_a_new_install",
        '"backup", "backups/"',
    ),
    "restore": by(
        "tests/test_backup.py",
        "test_backup_is_consistent_while_the_database_is_in_use_and_restore_brings_it_back",
        '"restore"',
    ),
    "--version": by("tests/test_operations.py", "test_version_flag", '"--version"'),
    "sync": by(
        "tests/e2e/test_smoke_real_entry_point.py",
        "test_sync_command_registers_commands_in_one_server",
        "sync_commands",
    ),
    "export-user": by("tests/test_cli.py", "test_import_then_context_then_export_then_forget", '"export-user"'),
    "forget-user": by("tests/test_cli.py", "test_import_then_context_then_export_then_forget", '"forget-user"'),
    "forget-unreadable": by(
        "tests/keys/test_missing_key_store.py",
        "test_forget_unreadable_lists_then_deletes_the_members_whose_keys_are_lost",
        '"forget-unreadable"',
    ),
    "import-history": by("tests/test_cli.py", "test_import_then_context_then_export_then_forget", '"import-history"'),
    "keygen": by(
        "tests/keys/test_cli_keys.py", "test_keygen_prints_a_key_the_settings_accept_on_its_last_line", '"keygen"'
    ),
    "rotate-master-key": by(
        "tests/keys/test_cli_keys.py",
        "test_rotate_master_key_rewraps_every_key_and_leaves_the_data_alone",
        '"rotate-master-key"',
    ),
    "context": by("tests/test_cli.py", "test_import_then_context_then_export_then_forget", '"context"'),
}


def coverage(command: str) -> str:
    return next((how for pattern, how in COVERED if re.fullmatch(pattern, command)), "")


def check_test_runs(how: str) -> None:
    """`how` names a test function that exists and whose code holds the evidence that it runs the command."""
    node, evidence = how.split(" ", 1)
    path, name = node.split("::")
    tree = ast.parse((ROOT / path).read_text())
    function = next(
        (f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name == name), None
    )
    assert function is not None, f"{node} does not exist"
    assert evidence in ast.get_source_segment((ROOT / path).read_text(), function), f"{node} does not hold {evidence}"


SHOWN = [(page, command) for page in PAGES for command in commands_shown(page)]


def test_the_pages_show_the_commands_this_check_reads() -> None:
    commands = {command for _, command in SHOWN}
    for expected in (
        "python3 tasks.py demo",
        ".venv/bin/python -m bot restore backups/bot-backup-2026-12-01-030000.tar.gz",
        "git pull",
    ):
        assert expected in commands
    assert len(command_line_table()) >= 15


@pytest.mark.parametrize(("page", "command"), SHOWN)
def test_every_command_shown_is_run_by_a_test_or_here(page: str, command: str) -> None:
    how = coverage(command)
    assert how, f"{page} shows `{command}`, which no test runs: run it in tests/test_docs.py or name the test"
    if how not in (HERE, DEPLOY, SYNOPSIS):
        check_test_runs(how)
    elif how == SYNOPSIS:
        assert "COMMAND" in command or command == COMPOSE


def test_the_command_line_table_lists_every_command_each_run_by_a_test() -> None:
    rows = command_line_table()
    names = {row.split()[0] for row in rows}
    choices = next(a for a in _parser()._actions if a.choices is not None).choices
    assert choices is not None
    assert names == {*choices, "--version"}, "README's command-line table lists exactly the bot's commands"
    for row in rows:
        check_test_runs(TABLE_COVERED[row.split()[0]])


# ---- the Docker and systemd lines, against deploy/ -----------------------------------------------------------------


def bot_arguments_parse(arguments: list[str]) -> None:
    try:
        _parser().parse_args(arguments)
    except SystemExit as exc:
        pytest.fail(f"the bot does not accept `{' '.join(arguments)}` (exit {exc.code})")


@pytest.mark.parametrize("command", [c for _, c in SHOWN if coverage(c) == DEPLOY])
def test_docker_and_systemd_lines_match_the_deploy_kit(command: str) -> None:
    words = shlex.split(command.replace("$(date +%F)", date.today().isoformat()))
    redirect = next((i for i, word in enumerate(words) if word in ("<", ">")), len(words))
    words, redirected = words[:redirect], words[redirect:]
    if redirected:  # the bot streams through `-`, which it refuses on a terminal: no TTY (-T) for the bytes
        assert len(redirected) == 2 and words[-1] == "-" and "-T" in words, command
    if words[:2] == ["docker", "compose"]:
        compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
        assert words[2:6] == ["--env-file", ".env", "-f", "deploy/compose.yaml"], command
        assert (ROOT / ".env.example").is_file()  # what `python3 tasks.py keys` turns into .env
        rest = words[6:]
        if rest[:1] == ["--profile"]:
            profiles = {p for service in compose["services"].values() for p in service.get("profiles", [])}
            assert rest[1] in profiles, command
            rest = rest[2:]
        action, *rest = rest
        assert action in ("run", "up", "logs", "stop", "exec"), command
        options = {"run": ["--rm", "-T"], "exec": ["-T"], "up": ["-d", "--build"], "logs": ["-f"]}.get(action, [])
        while rest and rest[0].startswith("-"):
            assert rest.pop(0) in options, command
        if action in ("run", "logs", "stop", "exec"):
            assert rest and rest[0] in compose["services"], command
        if action in ("run", "exec"):
            assert rest[1:4] == ["python", "-m", "bot"], command
            bot_arguments_parse(rest[4:])
        return
    unit = (ROOT / "deploy" / "memory-call-bot.service").read_text()
    if words[0] == "systemctl":
        assert "User=memory-call-bot" in unit
    elif words[0] == "sudo":
        assert words[1:3] == ["-u", "memory-call-bot"] and "User=memory-call-bot" in unit
        assert "WorkingDirectory=/opt/memory-call-bot" in unit and words[3:6] == [".venv/bin/python", "-m", "bot"]
        bot_arguments_parse(words[6:])
    else:
        assert command in unit, f"`{command}` is not the unit's install step"


# ---- the commands run here, as written -----------------------------------------------------------------------------


def bot_environment(scratch: Path, master_key: str) -> dict[str, str]:
    prefixes = ("DISCORD_", "AGORA_", "MEMORY_", "WEB_", "LLM_", "BOT_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(PYTHONPATH=str(ROOT), BOT_CONFIG=str(scratch / "none.toml"), MEMORY_MASTER_KEY=master_key)
    return env


def shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A checkout whose bot remembers one member, with member keys (data/bot.db and data/bot.keys.db)."""
    scratch = tmp_path_factory.mktemp("installed")
    (scratch / ".venv").symlink_to(ROOT / ".venv")
    keygen = shell(".venv/bin/python -m bot keygen", scratch, bot_environment(scratch, ""))
    master_key = keygen.stdout.strip().splitlines()[-1]
    env = bot_environment(scratch, master_key)
    history = {"started_at": "2026-12-01T10:00:00+00:00", "messages": [{"role": "user", "content": SAID}]}
    (scratch / "history.json").write_text(json.dumps(history))
    done = shell(f".venv/bin/python -m bot import-history {USER_ID} history.json", scratch, env)
    assert done.returncode == 0 and remembered(scratch, env), done.stdout + done.stderr
    return scratch, master_key


def fresh(installed: tuple[Path, str], tmp_path: Path) -> tuple[Path, dict[str, str]]:
    source, master_key = installed
    scratch = tmp_path / "checkout"
    shutil.copytree(source, scratch, symlinks=True)
    return scratch, bot_environment(scratch, master_key)


def remembered(scratch: Path, env: dict[str, str], user_id: str = USER_ID, said: str = SAID) -> bool:
    export = shell(f".venv/bin/python -m bot export-user {user_id}", scratch, env)
    assert export.returncode == 0, export.stdout + export.stderr
    return said in export.stdout


def today(path: str) -> str:
    return path.replace("$(date +%F)", date.today().isoformat())


def ran_backup(command: str, scratch: Path, env: dict[str, str]) -> None:
    destination = today(command.split(" backup ", 1)[1])
    target = scratch / destination
    if not target.parent.exists() and "mkdir -p backups" in {c for _, c in SHOWN}:
        target.parent.mkdir()  # the `mkdir -p backups` shown before it
    done = shell(command, scratch, env)
    assert done.returncode == 0, done.stdout + done.stderr
    if destination.endswith("/"):  # a folder: one archive of the database and the key store, named by the time
        archives = list(target.glob("bot-backup-*.tar.gz"))
        assert len(archives) == 1, f"`{command}` wrote {archives}"
        with tarfile.open(archives[0]) as tar:
            assert sorted(tar.getnames()) == ["bot.db", "bot.keys.db", "manifest.json"]
        target = archives[0]
    assert target.is_file() and target.stat().st_size > 0, f"`{command}` wrote no {target.name}"


def ran_restore(command: str, scratch: Path, env: dict[str, str]) -> None:
    backup = scratch / command.split()[-1]
    backup.parent.mkdir(exist_ok=True)
    made = shell(f".venv/bin/python -m bot backup {backup.relative_to(scratch)}", scratch, env)
    assert made.returncode == 0, made.stdout + made.stderr
    later = {"started_at": "2026-12-02T10:00:00+00:00", "messages": [{"role": "user", "content": "I am new here."}]}
    (scratch / "later.json").write_text(json.dumps(later))
    added = shell(".venv/bin/python -m bot import-history 4343 later.json", scratch, env)
    assert added.returncode == 0 and remembered(scratch, env, "4343", "I am new here."), added.stderr
    done = shell(command, scratch, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert remembered(scratch, env) and not remembered(scratch, env, "4343", "I am new here."), "the backup's state"


def ran_keygen(command: str, scratch: Path, env: dict[str, str]) -> None:
    done = shell(command, scratch, env)
    assert done.returncode == 0 and len(parse_master_key(done.stdout.strip().splitlines()[-1])) == 32


def ran_rotation(command: str, scratch: Path, env: dict[str, str]) -> None:
    new_key = shell(".venv/bin/python -m bot keygen", scratch, env).stdout.strip().splitlines()[-1]
    (scratch / ".env").write_text(f"MEMORY_NEW_MASTER_KEY={new_key}\n")  # as the guide says: in .env
    done = shell(command, scratch, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert remembered(scratch, {**env, "MEMORY_MASTER_KEY": new_key})


def ran_plainly(command: str, scratch: Path, env: dict[str, str]) -> None:
    done = shell(command, scratch, env)
    assert done.returncode == 0, done.stdout + done.stderr
    if command.endswith("--version"):
        assert __version__ in done.stdout
    if command.startswith("mkdir -p "):
        assert (scratch / command.split()[-1]).is_dir()


RUNNERS: list[tuple[str, Callable[[str, Path, dict[str, str]], None]]] = [
    (r"\.venv/bin/python -m bot backup .+", ran_backup),
    (r"\.venv/bin/python -m bot restore .+", ran_restore),
    (r"\.venv/bin/python -m bot keygen", ran_keygen),
    (r"\.venv/bin/python -m bot rotate-master-key", ran_rotation),
    (r"\.venv/bin/python -m bot (forget-unreadable --yes|--version)|mkdir -p \S+", ran_plainly),
]
SPECIAL = (r"git pull", r"python3 tasks\.py run", r"curl -X POST https://<domain>/agora/webhook")


RUN_HERE = list(dict.fromkeys(c for _, c in SHOWN if coverage(c) == HERE and not re.fullmatch("|".join(SPECIAL), c)))


@pytest.mark.parametrize("command", RUN_HERE)
def test_the_command_runs_as_written(command: str, installed: tuple[Path, str], tmp_path: Path) -> None:
    runner = next((run for pattern, run in RUNNERS if re.fullmatch(pattern, command)), None)
    assert runner is not None, f"no runner for `{command}` in tests/test_docs.py"
    scratch, env = fresh(installed, tmp_path)
    runner(command, scratch, env)


def test_git_pull_brings_the_new_version(tmp_path: Path) -> None:
    assert "git pull" in {c for _, c in SHOWN}
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    origin = tmp_path / "origin"
    origin.mkdir()
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=origin, check=True)
    (origin / "VERSION").write_text("1\n")
    subprocess.run([*git, "add", "."], cwd=origin, check=True)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=origin, check=True)
    subprocess.run(["git", "clone", "-q", str(origin), str(tmp_path / "clone")], check=True)
    (origin / "VERSION").write_text("2\n")
    subprocess.run([*git, "commit", "-qam", "two"], cwd=origin, check=True)
    done = shell("git pull", tmp_path / "clone", dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "clone" / "VERSION").read_text() == "2\n"


def test_tasks_run_sets_up_and_lists_the_settings_still_missing(tmp_path: Path) -> None:
    """`python3 tasks.py run` in a checkout whose .venv is current: it writes config.toml and both keys, then the
    bot lists what is missing (no token here). The .venv shares the real one's packages but is its own folder, so
    nothing is installed into the real one."""
    assert "python3 tasks.py run" in {c for _, c in SHOWN}
    for name in ("tasks.py", "pyproject.toml", ".env.example", "config.example.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(ROOT / ".venv" / "bin" / "python")
    (venv / "lib").symlink_to(ROOT / ".venv" / "lib")
    shutil.copy(ROOT / ".venv" / "pyvenv.cfg", venv / "pyvenv.cfg")
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    (venv / ".installed-base").write_text(digest)
    env = {k: v for k, v in bot_environment(tmp_path, "").items() if k not in ("MEMORY_MASTER_KEY", "BOT_CONFIG")}
    done = shell("python3 tasks.py run", tmp_path, env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "The bot cannot start yet. Set these settings" in done.stdout and "DISCORD_TOKEN" in done.stdout
    assert "installing" not in done.stderr
    values = dotenv_values(tmp_path / ".env")
    assert values["MEMORY_MASTER_KEY"] and values["WEB_LINK_SIGNING_KEY"]
    assert (tmp_path / "config.toml").read_text() == (ROOT / "config.example.toml").read_text()


async def test_an_unsigned_webhook_post_is_answered_401(tmp_path: Path) -> None:
    """The troubleshooting line's curl, against the bot's own web server in place of https://<domain>."""
    command = "curl -X POST https://<domain>/agora/webhook"
    assert command in {c for _, c in SHOWN}
    async with open_services(make_settings(tmp_path), full=True) as services:
        assert services.web is not None
        await services.web.start()
        local = command.replace("https://<domain>", services.web.url) + " -s -o /dev/null -w '%{http_code}'"
        done = await asyncio.to_thread(shell, local, tmp_path, dict(os.environ))
    assert done.stdout == "401", done.stdout + done.stderr


# ---- what it costs to run ------------------------------------------------------------------------------------------


def readme_costs() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index("## What it costs to run") :].split("\n## ", 1)[0]


def figure(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else str(value)


def test_the_costs_the_readme_names_are_the_codes() -> None:
    """Each figure is written from the code's value (a setting's default, a constant, a count of the prompt's
    tokens), so a change to either side fails here until the README says it again."""
    costs = " ".join(readme_costs().split())
    d = Settings()
    persona, tool_tokens = count_tokens(DEFAULT_PERSONA), count_tokens(json.dumps(tools.MEMORY_TOOLS))
    history = d.agora.max_history * 30  # lines average about 30 tokens (bot.memory.context.TOKENS_PER_CANDIDATE's note)
    turn = persona + d.memory.context_budget_tokens + history + tool_tokens
    sample = "USER: I went hiking with my sister in the mountains last weekend and we saw a bear.\n"
    transcript = count_tokens(sample * (extraction.MAX_TRANSCRIPT_CHARS // len(sample)))
    phrases = [
        f"`calls.page_close_grace_seconds`, {figure(d.calls.page_close_grace_seconds)} s",
        f"`agora.idle_timeout_seconds`, {figure(d.agora.idle_timeout_seconds)} s",
        f"`calls.max_minutes` agent minutes ({d.calls.max_minutes})",
        f"`calls.calls_per_member_per_day` ({d.calls.calls_per_member_per_day})",
        f"{figure(d.calls.max_minutes * d.calls.calls_per_member_per_day)} agent minutes a day",
        "`/settings max-minutes` ({}–{})".format(*MAX_MINUTES_RANGE),
        "`/settings daily-calls` ({}–{})".format(*DAILY_CALLS_RANGE),
        f"`agora.max_concurrent_agents` ({d.agora.max_concurrent_agents} calls at once",
        f"{figure(d.agora.max_concurrent_agents * 60)} agent minutes an hour",
        f"persona ({persona} with the default)",
        f"`memory.context_budget_tokens`, {figure(d.memory.context_budget_tokens)})",
        f"`agora.max_history`, {d.agora.max_history} messages; about 30 tokens a line, so about",
        f"so about {figure(round(history, -3))})",
        f"the memory tools ({tool_tokens}, `memory.voice_tools`): about {figure(round(turn, -2))}",
        f"`agora.llm_params` ({DEFAULT_LLM_PARAMS['max_tokens']})",
        f"instructions ({count_tokens(extraction.SYSTEM_PROMPT)})",
        f"(about {postcall.MAX_FACTS_IN_PROMPT} at most)",
        f"latest {figure(extraction.MAX_TRANSCRIPT_CHARS)} characters at most,",
        f"at most, about {figure(round(transcript, -3))} tokens of English",
        f"| at most {figure(postcall.EXTRACTION_MAX_TOKENS)} |",
        f"at most {chat.HISTORY_TURNS} messages and {figure(chat.HISTORY_TOKENS)} tokens",
        f"memory (at most {figure(d.memory.context_budget_tokens)})",
        f"at most {['no', 'once', 'twice'][tools.MAX_ROUNDS]} more",
        f"`memory.chat_idle_minutes` ({figure(d.memory.chat_idle_minutes)})",
        f"at most {figure(MAX_EMBED_CHARS)} characters each",
    ]
    for phrase in phrases:
        assert phrase in costs, f"README's costs should say {phrase!r}"


# ---- links between the pages ---------------------------------------------------------------------------------------


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", [*PAGES, "docs/architecture.md", "CONTRIBUTING.md"])
def test_every_link_to_a_page_or_section_of_this_repository_resolves(page: str) -> None:
    source = ROOT / page
    for target in re.findall(r"\]\(([^)\s]+)\)", source.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (source.parent / path).resolve() if path else source
        assert linked.exists(), f"{page} links to {target}, which does not exist"
        if anchor:
            assert anchor in anchors(linked), f"{page} links to {target}: no such heading"
