#!/usr/bin/env python3
"""The commands: `python3 tasks.py run` (set up and run the bot), `python3 tasks.py test` (set up and run the whole
test suite) and `python3 tasks.py demo` (try the bot locally against stand-ins of Discord, Agora and an LLM, no
accounts). Each creates ./.venv and installs what it needs; only Python 3.11+ is required."""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import shutil
import subprocess
import sys
import venv
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
CHROMIUM = Path("/usr/bin/chromium")
POSTGRES_BIN = Path("/usr/lib/postgresql")
SOURCES = ["bot", "cogs", "demo", "standins", "tests", "bench", "tasks.py"]


def say(message: str) -> None:
    sys.stderr.write(f"[tasks] {message}\n")
    sys.stderr.flush()


def ensure_venv(extra: str, *, or_extras: tuple[str, ...] = ()) -> None:
    """Install the bot (with `extra`) into .venv unless it is current: installed from this pyproject.toml with
    `extra`, or with one of `or_extras`, which hold everything `extra` does."""
    if sys.version_info < (3, 11):  # noqa: UP036 - this script runs under the system Python
        sys.exit(f"Python 3.11 or newer is needed; this is {sys.version.split()[0]}.")
    if not PYTHON.exists():
        say("creating .venv")
        venv.EnvBuilder(with_pip=True).create(VENV)
    stamp = VENV / f".installed-{extra or 'base'}"
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    stamps = [stamp, *(VENV / f".installed-{other}" for other in or_extras)]
    if any(s.exists() and s.read_text() == digest for s in stamps):
        return
    target = f".[{extra}]" if extra else "."
    say(f"installing {target} into .venv")
    pip("install", "--quiet", "--upgrade", "pip")
    pip("install", "--quiet", "-e", target)
    stamp.write_text(digest)


def pip(*args: str) -> None:
    """pip in .venv, its output shown only when it fails: an editable install prints setuptools' banner about
    folders named like the package even with --quiet, which reads like a problem in `tasks.py run`'s output."""
    done = subprocess.run([str(PYTHON), "-m", "pip", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        sys.exit(f"pip {' '.join(args)} failed (exit status {done.returncode}); its output is above.")


def ensure_debian_package(present: bool, package: str, why: str) -> None:
    """Install a Debian package the tests need (from Debian's archive, never downloaded otherwise)."""
    if present:
        return
    apt = shutil.which("apt-get")
    if apt is None:
        sys.exit(f"{why} (Debian package '{package}'); install it and run the tests again.")
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    say(f"installing Debian's {package} package: {why}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([*prefix, apt, "-qq", "update"], check=True, env=env)
    subprocess.run([*prefix, apt, "-qq", "install", "-y", "--no-install-recommends", package], check=True, env=env)


def ensure_chromium() -> None:
    """Browser tests drive Debian's Chromium."""
    ensure_debian_package(CHROMIUM.exists(), "chromium", "the browser tests need Chromium at /usr/bin/chromium")


def ensure_postgresql() -> None:
    """The store tests run every store test on PostgreSQL too, in a throwaway cluster (standins/postgres.py)."""
    present = any(POSTGRES_BIN.glob("*/bin/initdb"))
    ensure_debian_package(present, "postgresql", "the store tests start a throwaway PostgreSQL cluster")


MASTER_KEY_ENV = "MEMORY_MASTER_KEY"
LINK_KEY_ENV = "WEB_LINK_SIGNING_KEY"
BACK_IT_UP = "back the master key up apart from the database: without it no member's memory can be read"


def ensure_secret(env_file: Path, environ: Mapping[str, str], name: str, value: str) -> bool:
    """``name=value`` goes into .env unless the environment or .env already sets it (an empty line, as copied from
    .env.example, is filled in where it is). Returns True when it was written; .env is made owner-only."""
    if environ.get(name):
        return False
    lines = env_file.read_text(encoding="utf-8").splitlines() if env_file.exists() else []
    for i, line in enumerate(lines):
        key, _, current = line.strip().removeprefix("export ").partition("=")
        if key.strip() == name:
            if current.strip():
                return False
            lines[i] = f"{name}={value}"
            break
    else:
        lines.append(f"{name}={value}")
    env_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env_file.chmod(0o600)
    return True


def ensure_master_key(env_file: Path, environ: Mapping[str, str]) -> bool:
    """A new master key for the members' memory keys (the format of `python -m bot keygen`), unless one is set."""
    key = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode("ascii")
    return ensure_secret(env_file, environ, MASTER_KEY_ENV, key)


def ensure_keys(env_file: Path, environ: Mapping[str, str]) -> list[str]:
    """.env written from .env.example when it does not exist yet (so a later copy of the example is not needed and
    cannot overwrite the keys), with the master key and the link signing key filled in where they are empty.
    Returns the names written."""
    example = env_file.with_name(".env.example")
    if not env_file.exists() and example.is_file():
        env_file.write_text(example.read_text(encoding="utf-8"), encoding="utf-8")
        env_file.chmod(0o600)
        say(f"created {env_file.name} from {example.name}: put the secrets in it")
    written = [MASTER_KEY_ENV] if ensure_master_key(env_file, environ) else []
    if ensure_secret(env_file, environ, LINK_KEY_ENV, secrets.token_urlsafe(32)):
        written.append(LINK_KEY_ENV)
    return written


def make_keys(args: list[str]) -> int:
    """`python3 tasks.py keys`: the master key and the link signing key into .env (standard library only: it runs
    on a Docker host without the bot's packages)."""
    env_file = Path(args[0]) if args else ROOT / ".env"
    written = ensure_keys(env_file, {})
    if not written:
        say(f"{MASTER_KEY_ENV} and {LINK_KEY_ENV} are already set in {env_file}: nothing changed")
        return 0
    say(f"wrote {' and '.join(written)} into {env_file}" + (f"; {BACK_IT_UP}" if MASTER_KEY_ENV in written else ""))
    return 0


def run_bot(args: list[str]) -> int:
    ensure_venv("")
    config = ROOT / "config.toml"
    if not config.exists():
        shutil.copy(ROOT / "config.example.toml", config)
        say("created config.toml from config.example.toml; secrets go in .env (see .env.example)")
    written = ensure_keys(ROOT / ".env", os.environ)
    if MASTER_KEY_ENV in written:
        say(f"created a master key for members' memory in .env ({MASTER_KEY_ENV}); {BACK_IT_UP}")
    if LINK_KEY_ENV in written:
        say(f"created a link signing key in .env ({LINK_KEY_ENV}): call links keep working across restarts")
    say("other commands: .venv/bin/python -m bot COMMAND (for example `.venv/bin/python -m bot check`)")
    os.chdir(ROOT)
    os.execv(str(PYTHON), [str(PYTHON), "-m", "bot", *args, "run"])
    return 0


def run_tests(args: list[str]) -> int:
    ensure_venv("test")
    ensure_chromium()
    ensure_postgresql()
    os.chdir(ROOT)
    checks = [
        (["ruff", "check", *SOURCES], "ruff found problems (above)"),
        (["ruff", "format", "--check", *SOURCES], "some files are not formatted: run .venv/bin/ruff format"),
        (["mypy"], "mypy found type errors (above); the settings are under [tool.mypy] in pyproject.toml"),
    ]
    for command, failure in checks:
        result = subprocess.run([str(PYTHON), "-m", *command])
        if result.returncode != 0:
            say(failure)
            return result.returncode
    return subprocess.run([str(PYTHON), "-m", "pytest", *pytest_arguments(args, usable_cores())]).returncode


MAX_TEST_WORKERS = 8
"""Each worker starts its own PostgreSQL cluster and Chromium: more than this costs memory and start-up for little."""


def usable_cores() -> int:
    """The cores this process may run on (fewer than the machine's in a container pinned to some)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def pytest_arguments(args: list[str], cores: int) -> list[str]:
    """The whole suite runs on every core, one pytest-xdist worker each: run in one process, most of its time is
    spent waiting on real bot processes, servers and the browser, with one core busy. Anything after `test` (a
    selection, `-x`, `-s`, `--pdb`) runs in one process as given; add `-n N` to spread it over N workers."""
    if args or cores < 2:
        return args
    return ["-n", str(min(cores, MAX_TEST_WORKERS))]


def run_demo(args: list[str]) -> int:
    """The bot against loopback stand-ins (the `demo` package); `--no-setup` uses .venv as it is (offline)."""
    if "--no-setup" in args:
        if not PYTHON.exists():
            sys.exit("--no-setup needs an existing .venv: run `python3 tasks.py demo` once without it.")
    else:
        ensure_venv("demo", or_extras=("test",))
    os.chdir(ROOT)
    rest = [arg for arg in args if arg != "--no-setup"]
    os.execv(str(PYTHON), [str(PYTHON), "-m", "demo", *rest])
    return 0


COMMANDS = {"run": run_bot, "test": run_tests, "demo": run_demo, "keys": make_keys}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(
            "usage: python3 tasks.py run [--config FILE] | python3 tasks.py test [pytest options] | "
            "python3 tasks.py demo [--data DIR] [--port N] [--no-setup] | python3 tasks.py keys [ENV FILE]"
        )
    return COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
