"""Suite-wide fixtures. Network access is blocked by pytest-socket (see pyproject addopts): only loopback works."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from bot.config import DEFAULT_PERSONA
from bot.keys import SqliteKeyStore, generate_master_key_text, parse_master_key
from bot.keys.encrypted import EncryptedStore
from bot.llm import LLMClient
from bot.logs import HANDLER_NAME, THIRD_PARTY_LOGGERS
from bot.memory.service import MemoryService
from bot.store.postgres import PostgresStore
from bot.store.repository import Store
from bot.store.sqlite import SqliteStore
from standins.discord_gateway import FakeDiscord
from standins.harness import CallWorld, call_world
from standins.llm_server import FakeLLM, running_fake_llm
from standins.postgres import PostgresCluster, database_name, running_cluster
from tests.browser import browser, sdk_stub_url  # noqa: F401 - shared session fixtures


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "call_world(**options): how a test's `world` is built (call_world's options)")


def call_world_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The options a module or test gave its `world` with ``@pytest.mark.call_world(...)``."""
    marker = request.node.get_closest_marker("call_world")
    return dict(marker.kwargs) if marker else {}


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """The session's throwaway PostgreSQL server, started on first use; fails (never skips) if it cannot start."""
    yield from running_cluster()


@pytest.fixture
def new_postgres_database(postgres_cluster: PostgresCluster) -> Iterator[Callable[..., str]]:
    """Makes fresh databases on the session's cluster, empty or copies of a ``template`` (returns each one's URL);
    all of them are dropped when the test ends."""
    with ExitStack() as made:
        yield lambda template="template0": made.enter_context(postgres_cluster.database(template))


@pytest.fixture(scope="session")
def migrated_postgres_template(postgres_cluster: PostgresCluster) -> str:
    """A database of the session's cluster that the bot's PostgreSQL migrations ran on once, nothing else: the
    `store` fixture's databases are copies of it, as a bot finds its database at its next start, instead of
    running every migration again for each test (most of a PostgreSQL test's setup). Migrating an empty database
    is tested with `postgres_url` (tests/store/test_postgres.py, and every test that opens a call world on it)."""
    url = postgres_cluster.new_database()

    async def migrate() -> None:
        store = PostgresStore(url, min_connections=1, max_connections=1)
        await store.open()
        await store.close()

    with ThreadPoolExecutor(1) as thread:  # the fixture may be asked for inside a test's running event loop
        thread.submit(asyncio.run, migrate()).result()
    return database_name(url)


@pytest.fixture
def postgres_url(new_postgres_database: Callable[[], str]) -> str:
    """A fresh, empty database on the session's cluster, dropped when the test ends."""
    return new_postgres_database()


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """`python -m bot` installs its log handler and levels; undo that after each test that runs it."""
    root = logging.getLogger()
    level = root.level
    levels = {name: logging.getLogger(name).level for name in THIRD_PARTY_LOGGERS}
    yield
    for handler in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(handler)
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)


@pytest_asyncio.fixture(params=["sqlite", "sqlite-encrypted", "postgresql", "postgresql-encrypted"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Every test that takes `store` runs against both backends, plain and behind the layer that encrypts every
    member text with the member's own key (bot.keys.encrypted), so none can differ silently. The keys are in a
    SQLite key store file on both (allowed with PostgreSQL too; PostgresKeyStore has its own tests in
    tests/keys/test_postgres_shredding.py), which keeps the session's cluster to one database per test. That database
    is a copy of one migrated once this session (`migrated_postgres_template`)."""
    backend: Store
    master = parse_master_key(generate_master_key_text())
    if request.param.startswith("postgresql"):
        new_database = request.getfixturevalue("new_postgres_database")
        backend = PostgresStore(new_database(request.getfixturevalue("migrated_postgres_template")))
    else:
        backend = SqliteStore(tmp_path / "memory.db")
    keys = SqliteKeyStore(tmp_path / "memory.keys.db", master)
    if not request.param.endswith("-encrypted"):
        await backend.open()
        yield backend
        await backend.close()
        return
    await keys.open()
    encrypted = EncryptedStore(backend, keys)
    await encrypted.open()
    yield encrypted
    await backend.close()
    await keys.close()


@pytest_asyncio.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    """For the tests of SQLite's own machinery (pragmas, its file, FTS5 shadow tables)."""
    s = SqliteStore(tmp_path / "memory.db")
    await s.open()
    yield s
    await s.close()


@pytest_asyncio.fixture
async def memory(store: Store) -> AsyncIterator[MemoryService]:
    keys = store.keys if isinstance(store, EncryptedStore) else None
    service = MemoryService(store, budget_tokens=1500, persona=DEFAULT_PERSONA, keys=keys)
    yield service
    await service.wait_scrubbed()


@pytest_asyncio.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    """The loopback fake Discord (real HTTP and gateway), discord.py pointed at it; it must answer only with the
    shapes Discord documents, and never crash."""
    f = FakeDiscord()
    await f.start()
    f.patch(monkeypatch)
    yield f
    await f.stop()
    assert f.invalid_responses == [], "the fake answered with shapes Discord does not document"
    assert f.internal_errors == []


@pytest_asyncio.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    """The local OpenAI-compatible stand-in; tests script its replies and read what the bot sent."""
    async with running_fake_llm() as llm:
        yield llm


@pytest_asyncio.fixture
async def llm(fake_llm: FakeLLM) -> AsyncIterator[LLMClient]:
    async with LLMClient(base_url=fake_llm.base_url, model="fake-model", max_retries=0) as client:
        yield client


@pytest_asyncio.fixture
async def live_recall_world(tmp_path: Path, fake_llm: FakeLLM) -> AsyncIterator[CallWorld]:
    """Live recall on: the bot's LLM route in front of the strict fake LLM (``fake_llm``), calls driven by the Agora
    emulator; the route waits at most 1 s for the LLM."""
    async with call_world(tmp_path, llm_base_url=fake_llm.base_url, llm={"timeout_seconds": 1.0}) as world:
        yield world
