"""The call tests' world: the real services against the Agora emulator, web server and webhooks on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from standins.harness import CallWorld, call_world


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[CallWorld]:
    async with call_world(tmp_path) as w:
        yield w
