"""The call tests' world: the real services against the Agora emulator, web server and webhooks on. A module or
test builds it otherwise with ``@pytest.mark.call_world(**options)`` (the options of `call_world`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from standins.harness import CallWorld, call_world


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "call_world(**options): how the call tests' `world` is built")


@pytest.fixture
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CallWorld]:
    marker = request.node.get_closest_marker("call_world")
    async with call_world(tmp_path, **(marker.kwargs if marker else {})) as w:
        yield w
