"""The deployment kit in deploy/. No Docker engine runs here, so the Dockerfile is linted with hadolint and the
compose file validated against the Compose specification (check-jsonschema's vendored schema); the image's
HEALTHCHECK command and the systemd unit's command lines are run for real."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from bot.app import open_services
from standins.harness import make_settings

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent


def test_dockerfile_passes_hadolint_and_runs_slim_non_root_with_a_data_volume() -> None:
    lint = subprocess.run([BIN / "hadolint", DEPLOY / "Dockerfile"], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim", text, re.MULTILINE)
    user = re.search(r"^USER (\S+)$", text, re.MULTILINE)
    assert user is not None and user.group(1).split(":")[0] not in ("0", "root")
    assert 'VOLUME ["/data"]' in text and "MEMORY_DATABASE_PATH=/data/bot.db" in text
    assert "/healthz" in healthcheck_command()[-1]


def test_compose_file_follows_the_compose_spec_and_puts_caddy_in_front() -> None:
    check = subprocess.run(
        [BIN / "check-jsonschema", "--builtin-schema", "vendor.compose-spec", DEPLOY / "compose.yaml"],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    bot, caddy = compose["services"]["bot"], compose["services"]["caddy"]
    assert bot["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert "bot-data:/data" in bot["volumes"] and bot["environment"]["WEB_PUBLIC_URL"].startswith("https://")
    assert caddy["depends_on"]["bot"]["condition"] == "service_healthy"
    assert "443:443" in caddy["ports"] and "./Caddyfile:/etc/caddy/Caddyfile:ro" in caddy["volumes"]
    caddyfile = (DEPLOY / "Caddyfile").read_text()
    assert f"reverse_proxy bot:{bot['environment']['WEB_PORT']}" in caddyfile
    db = compose["services"]["db"]
    assert db["profiles"] == ["postgres"] and db["healthcheck"]["test"][0] == "CMD-SHELL"
    assert bot["depends_on"]["db"] == {"condition": "service_healthy", "required": False}
    assert "MEMORY_DATABASE_URL=postgresql://" in (DEPLOY / "compose.yaml").read_text()


def healthcheck_command() -> list[str]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    found = re.search(r"^HEALTHCHECK .*?CMD (\[.*\])$", text, re.MULTILINE)
    assert found is not None
    return list(yaml.safe_load(found.group(1)))  # the exec form is a JSON array


async def test_the_image_healthcheck_passes_on_a_healthy_bot_and_fails_when_the_database_does_not_answer(
    tmp_path: Path,
) -> None:
    command = healthcheck_command()
    assert command[0] == "python"
    settings = make_settings(tmp_path, agora={"app_id": None, "customer_id": None})
    async with open_services(settings, full=True) as services:
        assert services.web is not None
        await services.web.start()
        env = {**os.environ, "WEB_PORT": str(services.web.port)}
        healthy = await _run([sys.executable, *command[1:]], env)
        await services.store.close()
        unhealthy = await _run([sys.executable, *command[1:]], env)
        await services.store.open()
    assert healthy == 0 and unhealthy != 0


async def _run(argv: list[str], env: dict[str, str]) -> int:
    process = await asyncio.create_subprocess_exec(*argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return await asyncio.wait_for(process.wait(), timeout=30)


def unit() -> dict[str, list[str]]:
    entries: dict[str, list[str]] = {}
    for line in (DEPLOY / "memory-call-bot.service").read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            entries.setdefault(key, []).append(value)
    return entries


def test_systemd_unit_command_line_runs_and_stops_for_good_on_what_a_restart_cannot_fix(tmp_path: Path) -> None:
    """ExecStart as systemd would run it, with /opt and /var/lib moved under tmp_path: no secrets and a damaged
    database exit 2, which RestartPreventExitStatus covers (it covers only the main process: no ExecStartPre)."""
    entries = unit()
    home, state = tmp_path / "opt", tmp_path / "var"

    def moved(value: str) -> str:
        return value.replace("/opt/memory-call-bot", str(home)).replace("/var/lib/memory-call-bot", str(state))

    (home / ".venv" / "bin").mkdir(parents=True)
    python = home / ".venv" / "bin" / "python"  # stands for the venv the install steps create
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    state.mkdir()
    (home / ".env").write_text("# secrets would be here\n")
    assert Path(moved(entries["EnvironmentFile"][0])) == home / ".env"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    for assignment in entries["Environment"]:
        key, value = moved(assignment).split("=", 1)
        env[key] = value
    workdir = Path(moved(entries["WorkingDirectory"][0]))
    assert workdir == home

    def run_line(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(shlex.split(moved(command)), cwd=workdir, env=env, text=True, capture_output=True)

    assert "ExecStartPre" not in entries
    run = run_line(entries["ExecStart"][0])
    assert run.returncode == 2 and "DISCORD_TOKEN" in run.stdout  # no secrets in the empty .env
    assert entries["RestartPreventExitStatus"] == ["2"]  # a configuration problem is not restarted in a loop

    (home / ".env").write_text(
        "DISCORD_TOKEN=t\nAGORA_APP_ID=0123456789abcdef0123456789abcdef\nAGORA_APP_CERTIFICATE=c\n"
        "AGORA_CUSTOMER_ID=i\nAGORA_CUSTOMER_SECRET=s\n"
    )
    for line in (home / ".env").read_text().splitlines():
        key, value = line.split("=", 1)
        env[key] = value  # as systemd reads EnvironmentFile
    (state / "bot.db").write_bytes(b"SQLite format 3\x00" + b"\x00" * 84 + b"damaged" * 100)
    run = run_line(entries["ExecStart"][0])
    assert run.returncode == 2, run.stderr
    assert "is not a usable SQLite database" in run.stderr and "Traceback" not in run.stderr
    assert entries["KillSignal"] == ["SIGTERM"] and entries["User"] != ["root"]
