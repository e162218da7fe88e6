"""`python3 tasks.py test` runs the lint gate, then the whole suite on every core the machine gives it (one
pytest-xdist worker each); a selection after `test` runs in one process, as pytest was given it."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tasks


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The commands `python3 tasks.py test` runs, each succeeding; nothing is installed."""
    monkeypatch.chdir(tasks.ROOT)
    for setup in ("ensure_venv", "ensure_chromium", "ensure_postgresql"):
        monkeypatch.setattr(tasks, setup, lambda *args, **kwargs: None)
    ran: list[list[str]] = []

    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        ran.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(tasks.subprocess, "run", run)
    return ran


def run_test_command(monkeypatch: pytest.MonkeyPatch, cores: int, *args: str) -> int:
    monkeypatch.setattr(tasks, "usable_cores", lambda: cores)
    monkeypatch.setattr(sys, "argv", ["tasks.py", "test", *args])
    return tasks.main()


def test_the_whole_suite_runs_on_every_core_after_the_lint_gate(
    commands: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_test_command(monkeypatch, 2) == 0
    assert [command[2] for command in commands] == ["ruff", "ruff", "mypy", "pytest"]
    assert commands[-1] == [str(tasks.PYTHON), "-m", "pytest", "-n", "2"]


def test_a_big_machine_gets_a_bounded_number_of_workers(
    commands: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_test_command(monkeypatch, 64)
    assert commands[-1][-2:] == ["-n", str(tasks.MAX_TEST_WORKERS)]


def test_one_core_runs_the_suite_in_one_process(commands: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    run_test_command(monkeypatch, 1)
    assert commands[-1] == [str(tasks.PYTHON), "-m", "pytest"]


@pytest.mark.parametrize("args", [["tests/memory", "-x"], ["-s"], ["-n", "4"]])
def test_arguments_after_test_go_to_pytest_as_given(
    commands: list[list[str]], monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    run_test_command(monkeypatch, 2, *args)
    assert commands[-1] == [str(tasks.PYTHON), "-m", "pytest", *args]


def test_a_failing_lint_gate_runs_no_test(commands: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        return subprocess.CompletedProcess(command, 1 if command[2] == "mypy" else 0)

    monkeypatch.setattr(tasks.subprocess, "run", run)
    assert run_test_command(monkeypatch, 2) == 1
    assert [command[2] for command in commands] == ["ruff", "ruff", "mypy"]
