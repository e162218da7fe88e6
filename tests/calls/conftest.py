"""The call tests' world: the real services against the Agora emulator, web server and webhooks on, on SQLite.
A module or test builds it otherwise with ``@pytest.mark.call_world(**options)`` (the options of `call_world`),
and runs on SQLite and on PostgreSQL with ``@pytest.mark.on_each_backend``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from standins.harness import CallWorld, call_world
from tests.conftest import call_world_options

BACKENDS = ["sqlite", "postgresql"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "on_each_backend: the test runs with its `world` on SQLite and on PostgreSQL")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "world" in metafunc.fixturenames and metafunc.definition.get_closest_marker("on_each_backend"):
        metafunc.parametrize("world", BACKENDS, indirect=True)


@pytest.fixture
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CallWorld]:
    backend = getattr(request, "param", "sqlite")
    url = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    async with call_world(tmp_path, database_url=url, **call_world_options(request)) as w:
        yield w
