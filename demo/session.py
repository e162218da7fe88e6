"""The demo's machinery: the three stand-ins on loopback, the real bot in a process of its own, and their shutdown.

Everything binds 127.0.0.1 only. The bot runs ``python -m bot run`` (through ``demo.bot_process``, which only points
discord.py at the fake Discord) with a config file and environment written here, its working directory the data
folder (so no ``.env`` of the checkout is read) and its output in ``bot.log`` there."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from demo.scripted import SCRIPTED_MODEL, respond
from standins.agora_emulator import (
    TEST_APP_CERTIFICATE,
    TEST_APP_ID,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
    TEST_WEBHOOK_SECRET,
    ControlledAgoraEmulator,
)
from standins.discord_gateway import FakeDiscord
from standins.llm_server import FakeLLM

ROOT = Path(__file__).resolve().parents[1]
BOT_START_SECONDS = 90.0
BOT_STOP_SECONDS = 20.0
COMMANDS_FILE = "discord-commands.json"
"""The slash commands the bot synced, kept in a kept data folder: the bot syncs only when they change, and each
run's fake Discord starts empty (its ids are the same every run)."""
DEFAULT_WEB_PORT = 8080
DOWNLOADS = "downloads"
"""Where files the bot sends the member (an export) are saved, in the data folder."""
SETTINGS_PREFIXES = ("DISCORD_", "AGORA_", "WEB_", "MEMORY_", "LLM_", "CALLS_", "LOG_", "BOT_CONFIG")


class BotDidNotStart(Exception):
    """The bot process exited or did not connect in time; the message points at its log."""


@dataclass(frozen=True)
class RealLLM:
    """An OpenAI-compatible server from the environment (``LLM_BASE_URL``, ``LLM_API_KEY``, ``LLM_MODEL``)."""

    base_url: str
    model: str


def free_port(port: int = 0) -> int:
    """``port`` on 127.0.0.1 when it is free (0: any free port); raises OSError when it is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
        return int(sock.getsockname()[1])


def call_page_port(wanted: int | None) -> int:
    """The port of the call page: ``wanted`` (``--port``), else DEFAULT_WEB_PORT when it is free, so its links stay
    the same from run to run, else any free one."""
    if wanted is not None:
        try:
            return free_port(wanted)
        except OSError:
            raise BotDidNotStart(f"port {wanted} is already in use on 127.0.0.1; choose another with --port") from None
    try:
        return free_port(DEFAULT_WEB_PORT)
    except OSError:
        return free_port()


def real_llm(environ: dict[str, str]) -> RealLLM | None:
    base_url = environ.get("LLM_BASE_URL", "").strip()
    return RealLLM(base_url, environ.get("LLM_MODEL", "").strip() or "gpt-4o-mini") if base_url else None


def _master_key(data: Path) -> str:
    """The memory's master key, kept in the data folder so a kept folder can be read again."""
    path = data / "master.key"
    if not path.exists():
        path.write_text(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode("ascii"))
        path.chmod(0o600)
    return path.read_text().strip()


def _die_with_parent() -> None:
    """In the bot's process, before exec: Linux sends it SIGTERM if the demo dies without stopping it."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)


class DemoSession:
    """``await start()`` brings everything up, ``await stop()`` takes all of it down again (idempotent)."""

    def __init__(self, data: Path | None, environ: dict[str, str], web_port: int | None = None) -> None:
        """``web_port``: the call page's port (``--port``); see ``call_page_port``."""
        self.keep_data = data is not None
        self.data = data.resolve() if data is not None else Path(tempfile.mkdtemp(prefix="memory-call-demo-"))
        self.environ = environ
        self.llm = real_llm(environ)
        self.discord = FakeDiscord()
        self.web_port = call_page_port(web_port)
        self.emulator = ControlledAgoraEmulator(webhook_url=f"http://127.0.0.1:{self.web_port}/agora/webhook")
        self.scripted: FakeLLM | None = None if self.llm else FakeLLM(model_ids=(SCRIPTED_MODEL,))
        self.bot: asyncio.subprocess.Process | None = None
        self.stopped = False

    @property
    def log_path(self) -> Path:
        return self.data / "bot.log"

    @property
    def downloads(self) -> Path:
        return self.data / DOWNLOADS

    def remote_hint(self) -> str:
        """How to open the call page from another computer: everything listens on 127.0.0.1 here, so the browser's
        computer forwards the two ports the page talks to (the bot's, and the emulator's for the voice stand-in)."""
        emulator = urlsplit(self.emulator.control_url).port
        return (
            "On another computer (this one has no browser, or you reached it by SSH)? Forward the call page's ports "
            f"from yours, then open the link there: ssh -L {self.web_port}:127.0.0.1:{self.web_port} "
            f"-L {emulator}:127.0.0.1:{emulator} <this machine>"
        )

    async def start(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        await self.discord.start()
        commands = self.data / COMMANDS_FILE
        if commands.exists():
            self.discord.commands = json.loads(commands.read_text())
        await self.emulator.start()
        if self.scripted is not None:
            self.scripted.set_responder(respond)
            await self.scripted.start()
        config = self.data / "config.toml"
        config.write_text(self._config())
        with self.log_path.open("ab") as log:
            self.bot = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "demo.bot_process",
                self.discord.base_url,
                self.discord.gateway_url,
                cwd=self.data,
                env=self._bot_environment(config),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        await self._wait_until_ready()

    def _config(self) -> str:
        llm = ""
        if self.scripted is not None:
            llm = f'[llm]\nbase_url = "{self.scripted.base_url}"\nmodel = "{SCRIPTED_MODEL}"\n'
        return (
            "[discord]\ncall_cooldown_seconds = 0\n"
            f'[agora]\napi_base_url = "{self.emulator.base_url}"\napp_id = "{TEST_APP_ID}"\n'
            f'sdk_url = "{self.emulator.control_url}/sdk.js"\nemulator = true\n'
            f'[web]\nhost = "127.0.0.1"\nport = {self.web_port}\npublic_url = "http://127.0.0.1:{self.web_port}"\n'
            f"{llm}"
            f'[memory]\ndatabase_path = "{self.data / "bot.db"}"\n'
            "[calls]\nshutdown_grace_seconds = 1\npage_close_grace_seconds = 2\n"
        )

    def _bot_environment(self, config: Path) -> dict[str, str]:
        keep = {k: v for k, v in self.environ.items() if not k.startswith(SETTINGS_PREFIXES)}
        if self.llm is not None:
            for name in ("LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL"):
                if self.environ.get(name):
                    keep[name] = self.environ[name]
        return {
            **keep,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), self.environ.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1",
            "BOT_CONFIG": str(config),
            "DISCORD_TOKEN": "demo-token",
            "AGORA_APP_CERTIFICATE": TEST_APP_CERTIFICATE,
            "AGORA_CUSTOMER_ID": TEST_CUSTOMER_ID,
            "AGORA_CUSTOMER_SECRET": TEST_CUSTOMER_SECRET,
            "AGORA_WEBHOOK_SECRET": TEST_WEBHOOK_SECRET,
            "WEB_LINK_SIGNING_KEY": secrets.token_urlsafe(32),
            "MEMORY_MASTER_KEY": _master_key(self.data),
        }

    async def _wait_until_ready(self) -> None:
        assert self.bot is not None
        exited = asyncio.ensure_future(self.bot.wait())
        ready = asyncio.ensure_future(self._connected_with_commands())
        try:
            done, _ = await asyncio.wait(
                {exited, ready}, timeout=BOT_START_SECONDS, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in (exited, ready):
                task.cancel()
            await asyncio.gather(exited, ready, return_exceptions=True)
        if ready not in done:
            why = "stopped" if exited in done else f"did not connect within {BOT_START_SECONDS:.0f} s"
            raise BotDidNotStart(f"the bot {why}; its log: {self.log_path}\n{self.log_tail()}")

    async def _connected_with_commands(self) -> None:
        """Connected to the fake Discord with its commands synced, and the call page's server answering (the bot
        starts it last)."""
        await self.discord.wait_until_ready(timeout=BOT_START_SECONDS)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while "global" not in self.discord.commands or not await self._answers(http):  # noqa: ASYNC110
                await asyncio.sleep(0.1)

    async def _answers(self, http: aiohttp.ClientSession) -> bool:
        try:
            async with http.get(f"http://127.0.0.1:{self.web_port}/healthz") as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    async def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        if self.bot is not None and self.bot.returncode is None:
            self.bot.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.bot.wait(), BOT_STOP_SECONDS)
            except TimeoutError:
                self.bot.kill()
                await self.bot.wait()
        if self.discord.commands and self.data.exists():
            (self.data / COMMANDS_FILE).write_text(json.dumps(self.discord.commands))
        await self.discord.stop()
        await self.emulator.stop()
        if self.scripted is not None:
            await self.scripted.stop()
        if not self.keep_data:
            shutil.rmtree(self.data, ignore_errors=True)
