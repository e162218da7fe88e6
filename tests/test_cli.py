"""The command line as an admin uses it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.__main__ import main
from bot.memory.embedded import EMBEDDED_MODEL
from bot.store.migrations import LATEST_VERSION
from bot.store.sqlite import SqliteStore
from standins.harness import free_port


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in (
        "DISCORD_TOKEN",
        "AGORA_APP_ID",
        "AGORA_APP_CERTIFICATE",
        "AGORA_CUSTOMER_ID",
        "AGORA_CUSTOMER_SECRET",
        "LLM_BASE_URL",
        "BOT_CONFIG",
    ):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "config.toml"
    path.write_text(f'[memory]\ndatabase_path = "{tmp_path / "bot.db"}"\n\n[web]\nport = {free_port()}\n')
    return path


def check_says(config: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """What `python -m bot check` prints with ``config`` and the environment as the test set it."""
    main(["--config", str(config), "check"])
    return capsys.readouterr().out


def test_run_without_a_token_names_the_setting(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config), "run"]) == 2
    out = capsys.readouterr().out
    assert "discord.token (DISCORD_TOKEN)" in out
    assert "AGORA_CUSTOMER_SECRET" in out


def test_bad_config_exits_with_the_list_not_a_traceback(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[web]\nport = -1\n")
    assert main(["--config", str(path), "check"]) == 2
    err = capsys.readouterr().err
    assert f"web.port in {path}: must be a port from 1 to 65535, e.g. 8080, not -1" in err and "Traceback" not in err


def test_check_reports_each_setting_and_the_database(config: Path, capsys) -> None:
    assert main(["--config", str(config), "check"]) == 1
    out = capsys.readouterr().out
    assert "MISSING  discord.token (DISCORD_TOKEN)" in out
    assert "does not exist yet: `migrate` (or starting the bot) creates it at schema" in out
    assert "llm.base_url is not set" in out
    assert "cannot start" in out


def test_import_then_context_then_export_then_forget(config: Path, tmp_path: Path, capsys) -> None:
    history = tmp_path / "history.json"
    history.write_text(
        json.dumps(
            [
                {
                    "started_at": "2026-11-01T10:00:00Z",
                    "messages": [
                        {"role": "assistant", "content": "Hello!"},
                        {"role": "user", "content": "I'm Priya and I collect vintage cameras."},
                    ],
                },
                {
                    "started_at": "2026-11-02T10:00:00Z",
                    "messages": [{"role": "user", "content": "My favourite is a Leica M3."}],
                },
            ]
        )
    )
    assert main(["--config", str(config), "import-history", "555", str(history)]) == 0
    assert "Imported 2 conversation(s), 3 messages" in capsys.readouterr().out

    assert main(["--config", str(config), "context", "555", "--budget", "400"]) == 0
    messages = json.loads(capsys.readouterr().out)
    assert messages[0]["role"] == "system"
    assert "vintage cameras" in messages[1]["content"] and "Leica M3" in messages[1]["content"]

    assert main(["--config", str(config), "context", "555", "--query", "which camera do I like?"]) == 0
    assert "Leica" in json.loads(capsys.readouterr().out)[1]["content"]

    assert main(["--config", str(config), "export-user", "555"]) == 0
    export = json.loads(capsys.readouterr().out)
    assert [len(c["turns"]) for c in export["calls"]] == [2, 1]

    assert main(["--config", str(config), "forget-user", "555"]) == 0
    assert "2 calls" in capsys.readouterr().out
    assert main(["--config", str(config), "context", "555"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ('{"messages": []}', "started_at must be an ISO-8601"),
        (
            '{"started_at": "2026-01-01T00:00:00", "messages": [{"role": "system", "content": "x"}]}',
            "message 1",
        ),
    ],
)
def test_import_rejects_bad_files_clearly(config: Path, tmp_path: Path, capsys, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["--config", str(config), "import-history", "1", str(path)]) == 1
    assert message in capsys.readouterr().err


async def test_check_reaches_agora_and_the_llm_and_reports_ready(tmp_path: Path, monkeypatch, capsys) -> None:
    from bot.cli import check
    from standins.agora_emulator import running_emulator
    from standins.discord_gateway import FakeDiscord
    from standins.harness import make_settings
    from standins.llm_server import running_fake_llm

    discord_fake = FakeDiscord()
    await discord_fake.start()
    discord_fake.patch(monkeypatch)
    async with running_emulator() as emu, running_fake_llm() as llm:
        settings = make_settings(tmp_path, agora={"api_base_url": emu.base_url}, llm={"base_url": llm.base_url})
        assert await check(settings, None) == 0
        out = capsys.readouterr().out
        assert f"ok       {emu.base_url} answers" in out and f"ok       {llm.base_url} answers" in out
        assert "Ready to run." in out

        wrong = make_settings(tmp_path, agora={"api_base_url": emu.base_url, "customer_secret": "nope"})
        assert await check(wrong, None) == 1
        out = capsys.readouterr().out
        assert "FAIL     agora.api_base_url" in out and "AGORA_CUSTOMER_SECRET" in out
    await discord_fake.stop()


def test_migrate_creates_the_schema(config: Path, capsys) -> None:
    assert main(["--config", str(config), "migrate"]) == 0
    assert f"is at schema {LATEST_VERSION}." in capsys.readouterr().out


def test_sync_without_a_token_names_the_setting(config: Path, capsys) -> None:
    assert main(["--config", str(config), "sync"]) == 1
    assert "DISCORD_TOKEN" in capsys.readouterr().err


def test_check_warns_when_the_call_page_is_not_served_over_https(config: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("WEB_PUBLIC_URL", "http://calls.example.org")
    assert "web.public_url (WEB_PUBLIC_URL) is http://calls.example.org" in check_says(config, capsys)


def test_commands_run_on_uvloop(config: Path, capsys) -> None:
    """`python -m bot` runs every command, the bot included, on uvloop (bot.loop), a dependency on Linux."""
    assert "Event loop\n  ok       uvloop\n" in check_says(config, capsys)


def test_a_full_disk_is_explained_to_members_in_plain_words() -> None:
    from bot import messages
    from bot.i18n import english
    from bot.store.repository import StorageFull

    text = messages.for_error(StorageFull("database or disk is full"), english())
    assert text is not None and "storage is full" in text and "try again later" in text


def test_check_explains_why_live_recall_is_on_or_off(config: Path, monkeypatch, capsys) -> None:
    assert "off      llm.base_url is not set, so the agent hears only the call-start memory" in (
        check_says(config, capsys)
    )
    monkeypatch.setenv("MEMORY_LIVE_RECALL", "true")
    assert "off      memory.live_recall is true but llm.base_url (LLM_BASE_URL) is not set" in (
        check_says(config, capsys)
    )
    monkeypatch.delenv("MEMORY_LIVE_RECALL")

    monkeypatch.setenv("LLM_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    out = check_says(config, capsys)
    assert "on       llm.base_url is set (memory.live_recall default): the agent's LLM requests go to" in out
    assert "/llm/v1/chat/completions" in out
    assert "Agora's servers must reach the bot's LLM route" in out, "web.public_url is not HTTPS"

    monkeypatch.setenv("WEB_PUBLIC_URL", "https://calls.example.org")
    out = check_says(config, capsys)
    assert "https://calls.example.org/llm/v1/chat/completions" in out and "must reach the bot's LLM" not in out

    monkeypatch.setenv("MEMORY_LIVE_RECALL", "false")
    assert "off      memory.live_recall is false" in check_says(config, capsys)


def test_check_lists_the_languages_calls_can_be_held_in(config: Path, monkeypatch, capsys) -> None:
    out = check_says(config, capsys)
    assert "Call languages (agora.preset, agora.tts_vendor)" in out
    assert "ok       16 languages: de German, en English, es Spanish, fr French, hi Hindi, id Indonesian" in out
    assert "th Thai" in out and "answered in English" not in out, "MiniMax documents Hindi and Thai voices"

    monkeypatch.setenv("AGORA_TTS_VENDOR", "elevenlabs")
    monkeypatch.setenv("AGORA_TTS_PARAMS", '{"key": "k", "voice_id": "v"}')
    out = check_says(config, capsys)
    assert "warning  English only: the speech recognition and voice these settings name serve no other" in out
    assert "leave agora.tts_vendor unset to use the default preset's voices" in out


def test_check_reports_the_embedding_setting(config: Path, monkeypatch, capsys) -> None:
    out = check_says(config, capsys)
    assert "on       llm.embedding_model is not set: lines and facts are embedded in process" in out
    assert "wordllama" in out and "not installed" not in out
    monkeypatch.setenv("MEMORY_SEMANTIC_SEARCH", "false")
    assert "off      llm.embedding_model is not set and memory.semantic_search is false: BM25 only" in (
        check_says(config, capsys)
    )
    monkeypatch.setenv("LLM_EMBEDDING_MODEL", "text-embedding-3-small")
    out = check_says(config, capsys)
    assert "off      llm.embedding_model is 'text-embedding-3-small' but llm.base_url (LLM_BASE_URL) is not set" in out
    monkeypatch.delenv("MEMORY_SEMANTIC_SEARCH")

    base_url = f"http://127.0.0.1:{free_port()}/v1"
    monkeypatch.setenv("LLM_BASE_URL", base_url)
    out = check_says(config, capsys)
    assert "on       llm.embedding_model is 'text-embedding-3-small': lines and facts are embedded" in out
    assert f"{base_url}/embeddings and fused with BM25" in out
    assert "warning  llm.embedding_model: embeddings at " in out and "BM25 alone meanwhile" in out


def under_a_file(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "data").write_text("a file where the database folder should be\n")
    return tmp_path / "data" / "db" / "bot.db", f"{tmp_path / 'data'} is a file, not a folder"


def on_a_moved_volume(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "data").symlink_to(tmp_path / "volume-that-moved")
    return tmp_path / "data" / "bot.db", f"the folder {tmp_path / 'data'} is a link to"


def in_a_read_only_place(tmp_path: Path) -> tuple[Path, str]:
    """/proc takes no new folders, even from root (for whom permission bits say yes)."""
    return Path("/proc") / f"memory-call-bot-{tmp_path.name}" / "bot.db", "nothing can be created in /proc"


@pytest.mark.parametrize("place", [under_a_file, on_a_moved_volume, in_a_read_only_place])
def test_a_database_folder_that_cannot_be_created_fails_check_and_stops_run_with_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    place: Callable[[Path], tuple[Path, str]],
) -> None:
    """Issue 33 item 13: `check` said "Ready to run" and `run` ended in a traceback."""
    from standins.harness import fake_discord_in_thread
    from tests.test_startup import REQUIRED_ENV

    db, reason = place(tmp_path)
    monkeypatch.chdir(tmp_path)
    for name, value in REQUIRED_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LLM_BASE_URL", raising=False)
    config = tmp_path / "config.toml"
    config.write_text(f'[memory]\ndatabase_path = "{db}"\n\n[web]\nport = {free_port()}\n')
    before = sorted(tmp_path.iterdir())
    with fake_discord_in_thread(monkeypatch):
        assert main(["--config", str(config), "check"]) == 1
        out = capsys.readouterr().out
        assert main(["--config", str(config), "run"]) == 2
        err = capsys.readouterr().err
    assert f"FAIL     memory.database_path (MEMORY_DATABASE_PATH) {db}" in out and reason in out
    assert "Ready to run" not in out
    assert err.startswith(f"The bot cannot start: memory.database_path (MEMORY_DATABASE_PATH) {db}") and reason in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert sorted(tmp_path.iterdir()) == before and not db.parent.exists()


def test_check_leaves_no_trace_where_the_database_folder_will_be_created(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "new" / "deeper" / "bot.db"
    config.write_text(f'[memory]\ndatabase_path = "{db}"\n\n[web]\nport = {free_port()}\n')
    before = sorted(tmp_path.iterdir())
    assert main(["--config", str(config), "check"]) == 1  # no Discord token: not ready, but the folder is fine
    out = capsys.readouterr().out
    assert f"ok       {db} does not exist yet" in out
    assert sorted(tmp_path.iterdir()) == before


def _history_with_a_puppy(path: Path) -> Path:
    """A first call that mentions a puppy, then many calls of chatter that share no word with a question about
    a dog: only meaning can find the puppy."""
    from tests.memory.test_context import chatter

    sessions = [
        {
            "started_at": "2026-01-05T10:00:00Z",
            "messages": [{"role": "user", "content": "We adopted a little puppy from the shelter last spring."}],
        }
    ]
    for day, start in enumerate(range(0, 240, 24), start=10):
        lines = chatter(start + 24)[start:]
        sessions.append(
            {
                "started_at": f"2026-01-{day:02d}T10:00:00Z",
                "messages": [{"role": role, "content": text} for role, text in lines],
            }
        )
    path.write_text(json.dumps(sessions))
    return path


@pytest.mark.parametrize("semantic", [True, False])
def test_import_embeds_every_line_and_context_searches_them_as_the_bot_does(
    config: Path, tmp_path: Path, capsys, semantic: bool
) -> None:
    config.write_text(
        config.read_text().replace("[memory]\n", f"[memory]\nsemantic_search = {str(semantic).lower()}\n")
    )
    history = _history_with_a_puppy(tmp_path / "history.json")
    assert main(["--config", str(config), "import-history", "556", str(history)]) == 0
    out = capsys.readouterr().out
    assert "241 messages" in out
    assert ("Embedded 241 lines and facts for search by meaning." in out) is semantic

    async def vectors() -> tuple[int, int]:
        store = SqliteStore(tmp_path / "bot.db")
        await store.open()
        try:
            left = await store.unembedded(556, EMBEDDED_MODEL, 1000)
            return len(left), await store.count_turns(556)
        finally:
            await store.close()

    left, lines = asyncio.run(vectors())
    assert lines == 241
    assert left == (0 if semantic else 241), "every imported line has its vector"

    assert main(["--config", str(config), "context", "556", "--budget", "300", "--query", "how is my dog?"]) == 0
    printed = capsys.readouterr()
    block = json.loads(printed.out)[1]["content"]
    assert ("adopted a little puppy" in block) is semantic, "found by meaning, as the running bot finds it"
    assert "Not learned from yet" in printed.err and "call import-" in printed.err, "the pending post-call jobs"
