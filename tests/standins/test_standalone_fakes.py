"""The fake Discord and the fake LLM run on their own too: each prints where it listens, serves, and stops on
SIGTERM (the Agora emulator's own process is tested with its controls, tests/agora/test_emulator_controls.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def standalone(module: str, *args: str) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """The module's process and the words of its first line; it must exit 0 on SIGTERM."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        yield proc, proc.stdout.readline().split()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_fake_discord_prints_its_rest_and_gateway_addresses() -> None:
    with standalone("standins.discord_gateway") as (_proc, words):
        assert words[:2] == ["fake-discord", "ready"], words
        rest, gateway = words[2:]
        assert rest.startswith("http://127.0.0.1:") and rest.endswith("/api/v10")
        assert gateway == rest.replace("http://", "ws://").replace("/api/v10", "/gateway")
        answer = httpx.get(f"{rest}/gateway/bot", headers={"Authorization": "Bot any-token"})
        assert answer.status_code == 200 and answer.json()["url"] == gateway
        assert httpx.get(f"{rest}/gateway/bot").status_code == 401


def test_fake_llm_prints_its_base_url() -> None:
    with standalone("standins.llm_server", "--api-key", "k", "--model", "m1") as (_proc, words):
        assert words[:2] == ["fake-llm", "ready"], words
        base_url = words[2]
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        models = httpx.get(f"{base_url}/models", headers={"Authorization": "Bearer k"})
        assert [m["id"] for m in models.json()["data"]] == ["m1"]
        assert httpx.get(f"{base_url}/models").status_code == 401
