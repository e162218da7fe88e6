"""CONTRIBUTING.md works as written: the one-test commands select what they name, the screenshot command selects
the one test that takes the picture, each stand-in starts as shown and prints its address, and the by-hand
credentials are the emulator's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from standins import agora_emulator

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "CONTRIBUTING.md").read_text()


def shell_lines() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", GUIDE, re.DOTALL)
    return [line.split("#")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def collected(arguments: list[str], **env: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *arguments, "--collect-only", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if "::" in line]  # the guide's own -q lists node ids


def test_the_one_test_commands_select_what_they_name() -> None:
    lines = [line for line in shell_lines() if line.startswith(".venv/bin/python -m pytest")]
    assert len(lines) == 3
    one = lines[1].split()[3:]
    assert collected(one) == ["tests/test_config.py::test_web_port_0_is_refused_where_it_was_set"]
    assert (ROOT / lines[0].split()[3]).is_file() and (ROOT / lines[2].split()[3]).is_dir()


def test_the_screenshot_command_selects_the_test_that_takes_it() -> None:
    line = next(line for line in shell_lines() if line.startswith("UPDATE_DOCS_SCREENSHOT=1 "))
    arguments = line.split()[4:]
    assert collected(arguments) == ["tests/web/test_call_page_browser.py::test_agent_joins_transcript_and_screenshot"]
    source = (ROOT / "tests" / "web" / "test_call_page_browser.py").read_text()
    assert 'os.environ.get("UPDATE_DOCS_SCREENSHOT")' in source and '"docs" / "call-page.png"' in source


@pytest.mark.parametrize(
    ("module", "ready"),
    [
        ("standins.discord_gateway", r"fake-discord ready http://127\.0\.0\.1:\d+\S* ws://127\.0\.0\.1:\d+"),
        ("standins.agora_emulator", r"agora-emulator ready http://127\.0\.0\.1:\d+"),
        ("standins.llm_server", r"fake-llm ready http://127\.0\.0\.1:\d+"),
    ],
)
def test_each_stand_in_starts_as_shown(module: str, ready: str) -> None:
    assert f".venv/bin/python -m {module}" in shell_lines()
    process = subprocess.Popen([sys.executable, "-m", module], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert re.match(ready, first), first
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0


def test_the_by_hand_credentials_are_the_emulators() -> None:
    for name in ("TEST_APP_ID", "TEST_APP_CERTIFICATE", "TEST_CUSTOMER_ID", "TEST_CUSTOMER_SECRET"):
        variable = "AGORA_" + name.removeprefix("TEST_")
        assert f"{variable}={getattr(agora_emulator, name)}" in GUIDE, variable
    assert "## Try it locally" in (ROOT / "README.md").read_text()  # the section the guide sends readers to
