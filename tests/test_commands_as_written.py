"""Commands work as written: `python3 tasks.py keys` (and the first `tasks.py run`) writes .env from .env.example
with the master key and the link signing key filled in, so a later copy of the example is not needed; the hints the
bot prints name the command as it works where the operator is (`.venv/bin/python -m bot ...`, a bare `python -m bot`
finds no packages after `tasks.py run`; `docker compose ... run --rm bot python -m bot ...` in the image); README
and the operator guide name no bare `python -m bot` outside Docker."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from dotenv import dotenv_values

import tasks
from bot.config import load_settings
from bot.keys import parse_master_key

ROOT = Path(__file__).resolve().parents[1]


def checkout(tmp_path: Path) -> Path:
    for name in ("tasks.py", ".env.example", "config.example.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def test_tasks_keys_writes_env_from_the_example_with_both_keys(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    first = subprocess.run([sys.executable, "tasks.py", "keys"], cwd=root, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert "created .env from .env.example" in first.stderr
    assert "wrote MEMORY_MASTER_KEY and WEB_LINK_SIGNING_KEY into" in first.stderr
    assert "back the master key up apart from the database" in first.stderr
    env = root / ".env"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    values = dotenv_values(env)
    example = dotenv_values(root / ".env.example")
    assert set(values) == set(example), "every line of the example is there to fill in"
    assert len(parse_master_key(values["MEMORY_MASTER_KEY"] or "")) == 32
    assert len(values["WEB_LINK_SIGNING_KEY"] or "") >= 32
    assert values["DISCORD_TOKEN"] == ""

    again = subprocess.run([sys.executable, "tasks.py", "keys"], cwd=root, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "already set" in again.stderr and "nothing changed" in again.stderr
    assert dotenv_values(env) == values
    settings = load_settings(root / "config.example.toml", {k: v or "" for k, v in values.items()})
    assert settings.web.link_signing_key is not None and settings.memory.master_key is not None


def test_first_run_keeps_an_env_the_operator_already_wrote(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    (tmp_path / ".env.example").write_text("DISCORD_TOKEN=\nMEMORY_MASTER_KEY=\nWEB_LINK_SIGNING_KEY=\n")
    env.write_text("DISCORD_TOKEN=mine\nWEB_LINK_SIGNING_KEY=kept\n")
    assert tasks.ensure_keys(env, {}) == ["MEMORY_MASTER_KEY"]
    values = dotenv_values(env)
    assert values["DISCORD_TOKEN"] == "mine" and values["WEB_LINK_SIGNING_KEY"] == "kept"


def test_the_hint_run_prints_works_as_written(tmp_path: Path) -> None:
    """In a checkout whose .venv is set up, `run` without secrets names `.venv/bin/python -m bot check`, and that
    very line runs (it does not fail with "No module named ...")."""
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISCORD_", "AGORA_", "MEMORY_", "WEB_"))}
    env.update(PYTHONPATH=str(ROOT), BOT_CONFIG=str(tmp_path / "none.toml"))
    run = subprocess.run(
        [".venv/bin/python", "-m", "bot", "run"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2
    hint = re.search(r"Then run `([^`]+)` to verify everything", run.stdout)
    assert hint is not None and hint.group(1) == ".venv/bin/python -m bot check", run.stdout
    check = subprocess.run(hint.group(1).split(), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert "No module named" not in check.stderr and "Settings" in check.stdout


@pytest.mark.parametrize("page", ["README.md", "docs/operator-guide.md"])
def test_the_docs_name_no_bare_python_m_bot_outside_docker(page: str) -> None:
    for number, line in enumerate((ROOT / page).read_text().splitlines(), start=1):
        bare = re.findall(r"(?<![/\w])python -m bot", line)
        if bare and "docker" not in line.lower() and "See the whole flow" not in line:
            pytest.fail(f"{page} line {number} says `python -m bot`, which fails outside .venv: {line}")


def test_a_bare_python_m_bot_without_the_packages_says_what_to_run_not_a_traceback(tmp_path: Path) -> None:
    """`python -m bot check` with a Python that lacks the bot's packages (here: site-packages turned off with -S)
    printed `ModuleNotFoundError: No module named 'asyncpg'` and a traceback."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def bare(cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-S", "-m", "bot", "check"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
        )

    elsewhere = bare(tmp_path)
    assert elsewhere.returncode == 2 and elsewhere.stdout == ""
    assert "Traceback" not in elsewhere.stderr, elsewhere.stderr
    said = elsewhere.stderr.strip()
    assert said.startswith(f"The bot's packages are not installed for this Python ({sys.executable}: No module")
    assert "`python3 tasks.py run` in the repository" in said and "`.venv/bin/python -m bot check`" in said

    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").touch()
    in_checkout = bare(tmp_path).stderr.strip()  # a checkout whose .venv exists: the command that works there
    assert "Use `.venv/bin/python -m bot check`, or install them" in in_checkout and "tasks.py run" not in in_checkout
