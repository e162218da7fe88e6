"""`python3 tasks.py demo` as a person runs it: in a terminal (a pseudo-terminal here), with the call page in a
browser (headless Chromium). Every step checks what the member sees; at the end, every process the demo started
is gone and its throwaway data folder with them."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "(scripted reply, no real model) I heard: “{}” — {}"
NOTHING_YET = "my memory of you is empty so far"


class Terminal:
    """A program on a pseudo-terminal: ``send`` types a line, ``expect`` waits for output matching a pattern."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the demo, as started from a shell in the checkout
            os.chdir(ROOT)
            os.execvpe(argv[0], argv, env)
        self.output = ""
        self.seen = 0

    def _read(self) -> None:
        while select.select([self.fd], [], [], 0)[0]:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # the program exited and the terminal closed
                return
            if not chunk:
                return
            self.output += chunk.decode("utf-8", "replace").replace("\r", "")

    def send(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    async def expect(self, pattern: str, within: float = 20.0) -> re.Match[str]:
        """The first match of ``pattern`` in what was printed since the last match."""
        deadline = time.monotonic() + within
        while True:
            self._read()
            found = re.compile(pattern).search(self.output, self.seen)
            if found is not None:
                self.seen = found.end()
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} within {within} s; the terminal shows:\n{self.output[-4000:]}")
            await asyncio.sleep(0.05)

    def exit_status(self, within: float = 30.0) -> int:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            self._read()
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"the demo did not exit after quit:\n{self.output[-3000:]}")

    def close(self) -> None:
        """Stop the program if it still runs (a failed test), as closing its terminal window would."""
        if alive(self.pid):
            os.kill(self.pid, signal.SIGTERM)
            self.exit_status()
        os.close(self.fd)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # it exited meanwhile
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


LOOPBACK = {"0100007F", "00000000000000000000000001000000"}
"""127.0.0.1 and ::1 as /proc/net/tcp and tcp6 write them."""


def listening_addresses(pids: set[int]) -> set[tuple[str, int]]:
    """(address in /proc's hex form, port) of every TCP socket the processes listen on."""
    inodes: set[str] = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    found: set[tuple[str, int]] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # state LISTEN, owned by one of the processes
                address, port = fields[1].split(":")
                found.add((address, int(port, 16)))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def learned(line: str) -> re.Pattern[str]:
    """The scripted stand-in's fact about a line the member said, as the member is shown it (the bot may turn the
    stored "The user ..." into "You ...")."""
    return re.compile(rf"(The user|You) said: {re.escape(line)}")


def exists(path: Path) -> bool:
    return path.exists()


def read(path: Path) -> str:
    return path.read_text()


def press(terminal: Terminal, found: re.Match[str]) -> None:
    terminal.send(found.group(1))


async def say(page: Page, line: str) -> None:
    await page.get_by_role("textbox", name="Type instead of speaking").fill(line)
    await page.get_by_role("button", name="Say it").click()
    agent_lines = page.locator('#transcript li[data-role="assistant"] .text')
    await expect(agent_lines.last).to_have_text(ANSWER.format(line, NOTHING_YET))


async def test_a_person_tries_the_bot_in_the_demo(browser) -> None:
    terminal = start_demo()
    page: Page | None = None
    try:
        assert "a scripted stand-in: short, canned answers, not a real model" in (
            await terminal.expect(r"LLM .*")
        ).group(0)
        data = Path((await terminal.expect(r"Data +(\S+) \(deleted when you quit\)")).group(1))
        bot_pid = int((await terminal.expect(r"The bot is running \(process (\d+)\)", within=60)).group(1))
        started_processes = descendants(terminal.pid)
        assert bot_pid in started_processes
        listening = listening_addresses(started_processes | {terminal.pid})
        assert len(listening) == 4, listening  # the fake Discord, the emulator, the scripted LLM, the bot's web server
        assert {address for address, _port in listening} <= LOOPBACK, "nothing is reachable from other machines"

        terminal.send("call")
        await terminal.expect(r"may the agent remember you\?")
        press(terminal, await terminal.expect(r"\[(\d+)\] Remember me"))
        await terminal.expect(r"\[\d+\] Call without memory")
        link = (await terminal.expect(r"Open call page: (http://127\.0\.0\.1:(\d+)/call/\S+)")).group(1)
        web_port = int(link.split(":")[2].split("/")[0])
        await terminal.expect(r"\[\d+\] Hang up")

        page = await browser.new_page()
        await page.goto(link)
        await page.get_by_role("button", name="Start call").click()
        await expect(page.get_by_role("status")).to_have_text("Agent joined — speak any time")
        await expect(page.locator('#transcript li[data-role="assistant"] .text').first).to_have_text(
            "Hi! Good to hear from you. What's on your mind?"
        )
        await say(page, "My name is Mirela.")
        await say(page, "I love hiking in the Carpathians.")
        you = page.locator('#transcript li[data-role="user"] .text')
        await expect(you).to_have_text(["My name is Mirela.", "I love hiking in the Carpathians."])

        terminal.send("hangup")
        await terminal.expect(r"Call ended\. 5 lines of the conversation were kept\.")
        await terminal.expect(r"The agent learned 2 new things about you\.", within=30)
        await expect(page.get_by_role("status")).to_have_text("Call ended")
        await expect(page.locator("#summary-learned-list li")).to_have_text(
            [learned("My name is Mirela."), learned("I love hiking in the Carpathians.")], timeout=30_000
        )
        assert await page.locator("#type-form").is_hidden()

        terminal.send("memory")
        await terminal.expect(r"WHAT I REMEMBER ABOUT YOU")
        facts = await terminal.expect(r"What I know about you \(2\)\n  \| • (.*)\n  \| • (.*)\n")
        shown = sorted(re.sub(r" — from a call, \d{4}-\d\d-\d\d$", "", line) for line in facts.groups())
        assert learned("I love hiking in the Carpathians.").fullmatch(shown[0]), shown
        assert learned("My name is Mirela.").fullmatch(shown[1]), shown
        await terminal.expect(r"\[\d+\] Export")

        terminal.send("forget everything")
        press(terminal, await terminal.expect(r"\[(\d+)\] Forget everything\n"))
        await terminal.expect(r"Forgot everything: ")

        terminal.send("quit")
        await terminal.expect(r"Stopped\. Nothing of the demo is running any more\.")
        assert terminal.exit_status() == 0
    finally:
        if page is not None:
            await page.close()
        terminal.close()

    assert [pid for pid in started_processes | {terminal.pid} if alive(pid)] == []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", web_port), timeout=2).close()
    assert not exists(data), "the throwaway data folder is deleted"


def start_demo(*options: str) -> Terminal:
    """The demo in a terminal; its call page on a free port unless ``options`` give one (the default, 8080, may be
    taken by a demo another test worker runs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "PYTEST"))}
    python3 = shutil.which("python3")
    assert python3 is not None
    port = () if "--port" in options else ("--port", str(unused_port()))
    return Terminal([python3, "tasks.py", "demo", "--no-setup", *port, *options], env)


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_newcomer_types_as_they_speak_and_sees_the_agent_use_its_memory(tmp_path: Path) -> None:
    """Apostrophes and quotes in what a newcomer types reach the bot as typed; help names remember and the option
    syntax; the scripted agent says back what its memory holds; Export is saved where it can be opened; --port
    fixes the call page's port and the banner says how to reach it from another computer."""
    port = unused_port()
    data = tmp_path / "kept"
    terminal = start_demo("--data", str(data), "--port", str(port))
    try:
        await terminal.expect(r"The bot is running \(process \d+\)", within=60)
        hint = (await terminal.expect(r"On another computer.*\n")).group(0)
        assert f"ssh -L {port}:127.0.0.1:{port} -L " in hint
        help_text = (await terminal.expect(r"(?s)Commands \(what you would type.*?exactly as you typed it", 5)).group(0)
        assert "remember <text>" in help_text and "name=value" in help_text and "call private" in help_text

        terminal.send("chat what's my cat called? She's \"the boss\" here")
        press(terminal, await terminal.expect(r"\[(\d+)\] Remember me"))
        reply = await terminal.expect(r"I heard: “(.*)” — (.*)\n", within=30)
        assert reply.groups() == ("what's my cat called? She's \"the boss\" here", NOTHING_YET)
        assert "No closing quotation" not in terminal.output

        terminal.send("remember My daughter's birthday is on 4 May")
        await terminal.expect(r"My daughter's birthday is on 4 May", within=30)
        terminal.send("chat when's Ana's birthday?")
        reply = await terminal.expect(r"I heard: “when's Ana's birthday\?” — (.*)\n", within=30)
        assert "from my memory: “My daughter's birthday is on 4 May”" in reply.group(1), reply.group(0)

        terminal.send("call")
        link = (await terminal.expect(r"Open call page: (http://127\.0\.0\.1:(\d+)/call/\S+)")).group(2)
        assert int(link) == port
        terminal.send("hangup")
        await terminal.expect(r"Call ended\.")

        terminal.send("memory")
        press(terminal, await terminal.expect(r"\[(\d+)\] Export"))
        saved = Path((await terminal.expect(r"\[file\] \S+\.json \(\d+ bytes\), saved as (\S+)", within=30)).group(1))
        assert saved.parent == data.resolve() / "downloads"
        assert "My daughter's birthday is on 4 May" in [f["text"] for f in json.loads(read(saved))["facts"]]

        terminal.send("quit")
        await terminal.expect(r"Stopped\. Nothing of the demo is running any more\.")
        assert terminal.exit_status() == 0
    finally:
        terminal.close()


async def test_ctrl_c_while_the_bot_starts_stops_everything() -> None:
    terminal = start_demo()
    try:
        await terminal.expect(r"Starting the bot…")
        started_processes: set[int] = set()
        for _ in range(200):  # until the bot's process exists (the stand-ins are up by then)
            started_processes = descendants(terminal.pid)
            if started_processes:
                break
            await asyncio.sleep(0.05)
        assert started_processes, "the demo started the bot"
        os.write(terminal.fd, b"\x03")  # Ctrl-C: the terminal sends SIGINT to the demo
        await terminal.expect(r"Stopped\. Nothing of the demo is running any more\.")
        assert terminal.exit_status() == 130
    finally:
        terminal.close()
    assert [pid for pid in started_processes | {terminal.pid} if alive(pid)] == []


async def test_when_the_bot_dies_the_demo_says_so_and_stops() -> None:
    terminal = start_demo()
    try:
        bot_pid = int((await terminal.expect(r"The bot is running \(process (\d+)\)", within=60)).group(1))
        os.kill(bot_pid, signal.SIGKILL)
        tail = await terminal.expect(r"The bot stopped \(exit status -9\)\. The end of its log:\n((?:.*\n)+?)Stopping")
        assert " INFO " in tail.group(1), tail.group(1)
        await terminal.expect(r"Stopped\. Nothing of the demo is running any more\.")
        assert terminal.exit_status() == 0
    finally:
        terminal.close()
    assert not alive(bot_pid) and not alive(terminal.pid)
