"""The command lines an operator's hints name, as they work where the operator is: in this repository's
virtualenv (`.venv/bin/python -m bot ...`: a bare `python -m bot` finds no packages after `tasks.py run`), in the
Docker image (through `docker compose ... run`), or an installed Python."""

from __future__ import annotations

import os
import sys
from pathlib import Path

IMAGE_ENV = "MEMORY_CALL_BOT_IMAGE"
"""Set to 1 by deploy/Dockerfile."""
COMPOSE = "docker compose --env-file .env -f deploy/compose.yaml"
KEYS = "python3 tasks.py keys"
"""Writes MEMORY_MASTER_KEY and WEB_LINK_SIGNING_KEY into .env where they are empty (standard library only, so it
runs on a Docker host too)."""


def in_image() -> bool:
    return os.environ.get(IMAGE_ENV) == "1"


def bot_command(args: str) -> str:
    """``python -m bot <args>`` as the operator can type it here."""
    if in_image():
        return f"{COMPOSE} run --rm bot python -m bot {args}"
    if sys.prefix != sys.base_prefix:  # a virtualenv: name its interpreter, relative to here when inside
        python = Path(sys.executable)
        try:
            shown = str(python.relative_to(Path.cwd()))
        except ValueError:
            shown = str(python)
        return f"{shown} -m bot {args}"
    return f"python3 -m bot {args}"


def keys_command() -> str:
    """How to create the master key and the link signing key (into .env)."""
    if in_image():
        return f"`{KEYS}` on the host, in the repository root (then `{COMPOSE} up -d` again)"
    return f"`{KEYS}`"


def packages_missing(error: ModuleNotFoundError, args: list[str]) -> str:
    """What `python -m bot` says when this Python lacks the bot's packages, instead of a traceback: which Python,
    and the command that works here (the checkout's .venv when there is one)."""
    command = " ".join(args) or "COMMAND"
    if (Path.cwd() / ".venv" / "bin" / "python").exists():
        works = f"`.venv/bin/python -m bot {command}`"
    else:
        works = "`python3 tasks.py run` in the repository (it creates .venv and installs them), then " + (
            f"`.venv/bin/python -m bot {command}`"
        )
    return (
        f"The bot's packages are not installed for this Python ({sys.executable}: {error}). Use {works}, or "
        "install them into this Python with `python3 -m pip install .` in the repository."
    )
