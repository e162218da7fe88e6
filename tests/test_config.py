"""Settings load once from config.toml and the environment; every problem is reported at once."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bot.config import ConfigError, all_settings, env_name, load_settings

APP_ID = "970CA35de60c44645bbae8a215061b33"
ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_defaults_apply_without_a_file(tmp_path: Path) -> None:
    settings = load_settings(environ={"BOT_CONFIG": str(tmp_path / "absent.toml")})
    assert settings.memory.context_budget_tokens == 1500
    assert settings.agora.max_history == 32
    assert settings.discord.token is None


def test_environment_overrides_the_file_and_secrets_come_only_from_it(tmp_path: Path) -> None:
    path = write(tmp_path, f'[agora]\napp_id = "{APP_ID}"\nmax_history = 40\n[web]\nport = 9000\n')
    settings = load_settings(path, {"WEB_PORT": "9100", "DISCORD_TOKEN": "abc", "AGORA_CUSTOMER_SECRET": "s"})
    assert settings.web.port == 9100
    assert settings.agora.max_history == 40
    assert settings.discord.token.get_secret_value() == "abc"
    assert "abc" not in repr(settings) and "abc" not in str(settings.model_dump())


def test_every_problem_is_listed_with_its_setting_name(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[agora]\napp_id = "not-hex"\nmax_history = 0\ncustomer_secret = "oops"\n[web]\nport = "eighty"\n'
        "[memory]\nbudget = 3\n[nonsense]\nx = 1\n",
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(path, {"CALLS_MAX_MINUTES": "-5"})
    text = str(caught.value)
    for expected in (
        f"agora.app_id in {path}: must be the 32-character hex App ID",
        f"agora.max_history in {path}: must be 1 or more, not 0",
        "agora.customer_secret is a secret",
        "AGORA_CUSTOMER_SECRET",
        f"web.port in {path}: must be a whole number, not 'eighty'",
        "memory.budget in",
        "[nonsense]",
        "calls.max_minutes (CALLS_MAX_MINUTES): must be from 1 to",
    ):
        assert expected in text, expected
    assert "Traceback" not in text
    for pydantic_words in ("Value error", "Input should be", "unable to parse", "AGORA_APP_ID", "WEB_PORT"):
        assert pydantic_words not in text, pydantic_words  # plain words, and the file the value came from
    with pytest.raises(ConfigError, match=r"web.port \(WEB_PORT\): must be a whole number, not 'x'"):
        load_settings(path, {"WEB_PORT": "x"})  # from the environment (or .env), over the file


def test_web_port_0_is_refused_where_it_was_set(tmp_path: Path) -> None:
    path = write(tmp_path, "[web]\nport = 0\n")
    with pytest.raises(ConfigError, match=rf"web.port in {path}: must be a port from 1 to 65535, e.g. 8080"):
        load_settings(path, {})
    with pytest.raises(ConfigError, match=r"web.port \(WEB_PORT\): must be a port from 1"):
        load_settings(None, {"WEB_PORT": "0", "BOT_CONFIG": str(tmp_path / "none.toml")})


def test_invalid_toml_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_settings(write(tmp_path, "[agora\n"), {})


def test_dotenv_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LLM_API_KEY", raising=False)
    monkeypatch.setenv("BOT_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / ".env").write_text("LLM_API_KEY=from-dotenv\n")
    settings = load_settings()
    assert settings.llm.api_key.get_secret_value() == "from-dotenv"
    monkeypatch.delenv("LLM_API_KEY")


def configuration_table() -> dict[str, list[str]]:
    """The operator guide's configuration table: setting -> its cells (environment, default, secret, meaning)."""
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    section = guide[guide.index("## Configuration\n") :]
    table = section[section.index("| Setting | Environment | Default | Secret | Meaning |") :]
    rows: dict[str, list[str]] = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("| `"):
            break
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def documented_default(default: object, secret: bool) -> set[str]:
    """How the table may write a setting's default (a setting whose default is described in words is not here)."""
    if default is None:
        return {"—"} if secret else {"none", "—"}
    if isinstance(default, bool):
        return {str(default).lower(), f"`{str(default).lower()}`"}
    if isinstance(default, float) and default.is_integer():
        default = int(default)
    if isinstance(default, dict):
        default = json.dumps(default)
    return {str(default), f"`{default}`"}


DESCRIBED_DEFAULTS = {"memory.key_store", "memory.persona", "memory.live_recall"}
"""Defaults computed at start-up or too long for a cell: the table says them in words."""


def test_example_config_is_valid_and_documents_every_setting() -> None:
    root = ROOT
    load_settings(root / "config.example.toml", {})
    table = configuration_table()
    settings = {f"{section}.{key}": (section, key, default, secret) for section, key, default, secret in all_settings()}
    assert sorted(table) == sorted(settings), "the operator guide's configuration table lists exactly the settings"
    for name, (section, key, default, secret) in settings.items():
        environment, written_default, written_secret, meaning = table[name]
        assert environment == f"`{env_name(section, key)}`", name
        assert written_secret == ("yes" if secret else "no"), name
        assert meaning, name
        if name not in DESCRIBED_DEFAULTS:
            assert written_default in documented_default(default, secret), (name, written_default, default)
    env_example = (root / ".env.example").read_text()
    for section, key, _default, secret in all_settings():
        if secret:
            assert env_name(section, key) in env_example


def test_shards_and_database_url_are_validated_with_their_names() -> None:
    settings = load_settings(environ={"DISCORD_SHARD_COUNT": "4", "DISCORD_SHARD_IDS": "1, 3"}, load_dotenv_file=False)
    assert (settings.discord.shard_count, settings.discord.shard_ids) == (4, [1, 3])
    assert load_settings(environ={}, load_dotenv_file=False).discord.shard_ids is None
    with pytest.raises(ConfigError, match=r"from 0 to 3"):
        load_settings(environ={"DISCORD_SHARD_COUNT": "4", "DISCORD_SHARD_IDS": "4"}, load_dotenv_file=False)
    with pytest.raises(ConfigError, match=r"needs discord.shard_count"):
        load_settings(environ={"DISCORD_SHARD_IDS": "0"}, load_dotenv_file=False)
    with pytest.raises(ConfigError, match=r"memory.database_url.*MEMORY_DATABASE_URL.*PostgreSQL URL"):
        load_settings(environ={"MEMORY_DATABASE_URL": "mysql://x"}, load_dotenv_file=False)
