"""The Docker path makes the master key and the link signing key: the deploy steps (compose.yaml's comments and
README) run `python3 tasks.py keys`, which needs no bot packages on the host, and say to back the master key up;
compose hands .env to the container; `check` in the image names the command that works there (the image sets
MEMORY_CALL_BOT_IMAGE=1), and outside it the one that works in the checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from dotenv import dotenv_values

from bot.invocation import IMAGE_ENV

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


def check(tmp_path: Path, **env: str) -> str:
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DISCORD_", "AGORA_", "MEMORY_", "WEB_", "LLM_"))},
        "BOT_CONFIG": str(tmp_path / "none.toml"),
        "MEMORY_DATABASE_PATH": str(tmp_path / "data" / "bot.db"),
        **env,
    }
    result = subprocess.run(
        [sys.executable, "-m", "bot", "check"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def test_the_deploy_steps_create_both_keys_with_one_command(tmp_path: Path) -> None:
    steps = (DEPLOY / "compose.yaml").read_text()
    readme = (ROOT / "README.md").read_text()
    deploy = readme[readme.index("## Deploy") : readme.index("Without Docker:")]
    for text in (steps, deploy):
        assert "python3 tasks.py keys" in text and "cp .env.example" not in text
        assert "back the master key up" in text.lower()
        assert text.index("python3 tasks.py keys") < text.index("up -d --build")
    compose = yaml.safe_load(steps)
    assert compose["services"]["bot"]["env_file"] == ["../.env"]  # what tasks.py keys wrote reaches the bot

    for name in ("tasks.py", ".env.example"):  # a host with Python 3 and the repository, no .venv
        shutil.copy(ROOT / name, tmp_path / name)
    made = subprocess.run([sys.executable, "-S", "tasks.py", "keys"], cwd=tmp_path, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    values = dotenv_values(tmp_path / ".env")
    assert values["MEMORY_MASTER_KEY"] and values["WEB_LINK_SIGNING_KEY"]


def test_the_image_tells_check_where_it_runs() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"    {IMAGE_ENV}=1 \\" in dockerfile.splitlines()


def test_check_names_the_command_that_works_where_the_admin_is(tmp_path: Path) -> None:
    in_image = check(tmp_path, **{IMAGE_ENV: "1"})
    where = "`python3 tasks.py keys` on the host, in the repository root (then `docker compose --env-file .env -f "
    for setting in ("memory.master_key (MEMORY_MASTER_KEY) is not set", "web.link_signing_key (WEB_LINK_SIGNING_KEY)"):
        line = next(line for line in in_image.splitlines() if setting in line)
        assert where in line, line
    assert "back the master key up" in in_image

    here = check(tmp_path)
    assert "Create it (and the link signing key) with `python3 tasks.py keys`, and back" in here
    assert "on the host" not in here and "docker compose" not in here


def test_every_docker_compose_command_shown_carries_the_env_file() -> None:
    """compose.yaml needs DOMAIN from the repository's .env, which `docker compose -f deploy/compose.yaml` alone does
    not read (it looks beside the compose file): a hint without `--env-file .env` fails with "set DOMAIN". The
    shorthand `docker compose ...` is used only where the full form is given first."""
    shown = [
        ROOT / "README.md",
        ROOT / "docs" / "operator-guide.md",
        DEPLOY / "compose.yaml",
        DEPLOY / "Dockerfile",
        *sorted((ROOT / "bot").rglob("*.py")),
    ]
    for path in shown:
        for command in re.findall(r"docker compose [^`'\"\n]*", path.read_text()):
            if command.startswith("docker compose ..."):
                continue
            assert command.startswith("docker compose --env-file .env -f deploy/compose.yaml"), (path, command)
