"""`python3 tasks.py demo` sets up .venv like the other commands, and installs nothing when it is current: set up
for the demo, or for the tests (whose extra holds everything the demo needs)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

import tasks


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """tasks.py pointed at a checkout in tmp_path whose .venv exists; returns the commands it would run."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    monkeypatch.setattr(tasks, "ROOT", tmp_path)
    monkeypatch.setattr(tasks, "VENV", venv)
    monkeypatch.setattr(tasks, "PYTHON", venv / "bin" / "python")
    ran: list[list[str]] = []

    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        ran.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(tasks.subprocess, "run", run)
    return ran


def stamp(extra: str, text: str | None = None) -> None:
    digest = hashlib.sha256((tasks.ROOT / "pyproject.toml").read_bytes()).hexdigest()
    (tasks.VENV / f".installed-{extra}").write_text(digest if text is None else text)


@pytest.mark.parametrize("extra", ["demo", "test"])
def test_a_current_venv_is_used_as_it_is(checkout: list[list[str]], extra: str) -> None:
    stamp(extra)
    tasks.ensure_venv("demo", or_extras=("test",))
    assert checkout == []


def test_a_stale_venv_gets_the_demo_installed(checkout: list[list[str]]) -> None:
    stamp("test", "an older pyproject.toml")
    stamp("base")
    tasks.ensure_venv("demo", or_extras=("test",))
    assert checkout[-1][-2:] == ["-e", ".[demo]"]
    assert (tasks.VENV / ".installed-demo").read_text() == (tasks.VENV / ".installed-base").read_text()


def test_demo_runs_the_demo_package_with_its_arguments(
    checkout: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tasks.ROOT)  # tasks.py changes to the checkout; this puts the test's own folder back after
    executed: list[list[str]] = []
    monkeypatch.setattr(tasks.os, "execv", lambda path, argv: executed.append(argv))
    monkeypatch.setattr(sys, "argv", ["tasks.py", "demo", "--no-setup", "--data", "kept"])
    tasks.main()
    assert checkout == [], "--no-setup installs nothing, even with no stamp at all"
    assert executed == [[str(tasks.PYTHON), "-m", "demo", "--data", "kept"]]


def fake_pip(checkout: Path, exit_status: int) -> None:
    """.venv's python stands in for pip: it writes what setuptools writes on an editable install, then exits."""
    python = checkout / ".venv" / "bin" / "python"
    python.write_text(
        "#!/bin/sh\n"
        "echo 'BuildBackendWarning: Editable installation.' >&2\n"
        "echo 'Please be careful with folders in your working directory with the same name as your package' >&2\n"
        f"exit {exit_status}\n"
    )
    python.chmod(0o755)


def test_installing_shows_no_editable_install_banner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    monkeypatch.setattr(tasks, "ROOT", tmp_path)
    monkeypatch.setattr(tasks, "VENV", tmp_path / ".venv")
    monkeypatch.setattr(tasks, "PYTHON", tmp_path / ".venv" / "bin" / "python")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    fake_pip(tmp_path, 0)
    tasks.ensure_venv("")
    seen = capfd.readouterr()
    assert seen.out == "" and seen.err == "[tasks] installing . into .venv\n"

    fake_pip(tmp_path, 1)
    (tasks.VENV / ".installed-base").unlink()
    with pytest.raises(SystemExit) as failed:
        tasks.ensure_venv("")
    assert "pip install --quiet --upgrade pip failed (exit status 1)" in str(failed.value.code)
    assert "Editable installation" in capfd.readouterr().err  # shown when pip fails: it may say why
