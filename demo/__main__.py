"""``python -m demo [--data DIR] [--port N]`` (what ``python3 tasks.py demo`` runs): the bot on this machine, no
accounts."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import stat
import sys
from pathlib import Path

from demo.session import DEFAULT_WEB_PORT, BotDidNotStart, DemoSession
from demo.terminal import DEMO_MEMBER, DEMO_MEMBER_NAME, HELP, Command, CommandError, Screen, parse_command

REFRESH_SECONDS = 0.1
AUTOCOMPLETE_SECONDS = 10.0


def write(text: str) -> None:
    """A line of output; it starts by returning to the line's start, over a prompt left waiting there."""
    sys.stdout.write("\r" + text + "\n")
    sys.stdout.flush()


def prompt() -> None:
    sys.stdout.write("> ")
    sys.stdout.flush()


def banner(session: DemoSession) -> str:
    if session.llm is None:
        llm = (
            "LLM      a scripted stand-in: short, canned answers, not a real model (set LLM_BASE_URL and "
            "LLM_API_KEY for one)"
        )
    else:
        llm = f"LLM      {session.llm.base_url} (model {session.llm.model}), from LLM_BASE_URL"
    data = "kept" if session.keep_data else "deleted when you quit"
    return "\n".join(
        [
            "Memory Call, a local trial: the real bot against stand-ins, all on 127.0.0.1 (nothing is reachable "
            "from other machines).",
            f"Discord  a stand-in server with #general and you, {DEMO_MEMBER_NAME}",
            "Agora    the ConvoAI emulator: no audio; on the call page you type instead of speaking",
            llm,
            f"Data     {session.data} ({data}); the bot's log is {session.log_path}",
        ]
    )


def pollable(fd: int) -> bool:
    """Whether the event loop can wait for input on ``fd``: a terminal, a pipe or a socket (not a file)."""
    mode = os.fstat(fd).st_mode
    return os.isatty(fd) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def run(session: DemoSession) -> int:
    """Start everything, run the member's session until quit, end of input or a signal, then stop everything."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    write(banner(session))
    write("Starting the bot…")
    try:
        if not await started(session, stop):
            return 130
        assert session.bot is not None
        write(f"The bot is running (process {session.bot.pid}).\n{session.remote_hint()}\n\n{HELP}\n")
        await member_session(session, stop)
    except BotDidNotStart as exc:
        write(f"The demo cannot start: {exc}")
        return 1
    finally:
        write("Stopping the bot and the stand-ins…")
        await session.stop()
        write("Stopped. Nothing of the demo is running any more.")
    return 0


async def started(session: DemoSession, stop: asyncio.Event) -> bool:
    """Start the session; False when a signal came first (Ctrl-C while the bot starts)."""
    starting = asyncio.ensure_future(session.start())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not starting.done():
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        return False
    starting.result()
    return True


async def member_session(session: DemoSession, stop: asyncio.Event) -> None:
    """Read the member's lines and print what they see, until quit, end of input, a signal, or the bot exiting."""
    loop = asyncio.get_running_loop()
    session.discord.user(DEMO_MEMBER, DEMO_MEMBER_NAME)
    screen = Screen(session.discord, write, session.downloads)
    lines: asyncio.Queue[str | None] = asyncio.Queue()

    async def read_lines() -> None:
        if pollable(sys.stdin.fileno()):
            reader = asyncio.StreamReader()
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
            while raw := await reader.readline():
                await lines.put(raw.decode("utf-8", "replace").strip())
        else:  # a file or /dev/null: reading it never blocks
            while text := sys.stdin.readline():
                await lines.put(text.strip())
        await lines.put(None)

    async def watch() -> None:
        assert session.bot is not None
        while session.bot.returncode is None:
            if screen.refresh():
                prompt()
            await asyncio.sleep(REFRESH_SECONDS)
        write(f"The bot stopped (exit status {session.bot.returncode}). The end of its log:\n{session.log_tail()}")
        stop.set()

    tasks = [loop.create_task(read_lines()), loop.create_task(watch())]
    stopping = loop.create_task(stop.wait())
    prompt()
    try:
        while not stop.is_set():
            getting = loop.create_task(lines.get())
            await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():
                getting.cancel()
                break
            line = getting.result()
            if line is None or line.lower() in ("quit", "exit"):
                break
            if await handle(session, screen, line):
                prompt()
    finally:
        for task in (*tasks, stopping):
            task.cancel()
        await asyncio.gather(*tasks, stopping, return_exceptions=True)


async def handle(session: DemoSession, screen: Screen, line: str) -> bool:
    """Act on one typed line; True when the prompt should be shown again at once."""
    if screen.form is not None:
        return await fill_form(session, screen, line)
    if not line:
        return True
    if line.lower() in ("help", "?"):
        write(HELP)
        return True
    fake = session.discord
    if line.isdigit():
        choice = screen.choices.get(int(line))
        if choice is None:
            write(f"There is no choice {line} on screen.")
            return True
        if isinstance(choice, Command):
            return await run_command(session, screen, choice)
        try:
            await fake.click(choice.message_id, choice.custom_id, DEMO_MEMBER, values=choice.values)
        except LookupError:
            write("That choice is no longer there.")
            return True
        return False
    try:
        command = parse_command(fake.commands.get("global", []), line)
    except CommandError as exc:
        write(str(exc))
        return True
    return await run_command(session, screen, command)


async def fill_form(session: DemoSession, screen: Screen, line: str) -> bool:
    """The line answers the form's current field; the last answer submits it (cancel closes it, as Esc does)."""
    assert screen.form is not None
    if line.lower() == "cancel":
        screen.form = None
        write("Form closed; nothing was sent.")
        return True
    custom_id = screen.form.custom_id
    values = screen.answer(line)
    if values is None:
        return True
    await session.discord.submit_modal(custom_id, DEMO_MEMBER, values)
    return False


async def run_command(session: DemoSession, screen: Screen, command: Command) -> bool:
    """Send the command; an option still to be searched is searched first (Discord's autocomplete) and its
    results offered as numbered choices, each the command with that value."""
    fake = session.discord
    if command.search is None:
        await fake.slash(command.name, DEMO_MEMBER, command.options, command.subcommand, command.permissions)
        return False
    option, typed = command.search
    token = await fake.autocomplete(
        command.name,
        DEMO_MEMBER,
        option,
        typed,
        command.subcommand,
        options=command.options,
        permissions=command.permissions,
    )
    try:
        _kind, answer = await fake.next_response(token, timeout=AUTOCOMPLETE_SECONDS)
    except TimeoutError:
        write(f"The bot offered nothing to pick for {option}.")
        return True
    found = answer["data"]["choices"]
    if not found:
        write(f"Nothing to pick for {option}" + (f" matching “{typed}”." if typed else "."))
        return True
    lines = [f"Pick the {option}:"]
    for item in found:
        picked = Command(
            command.name, command.subcommand, {**command.options, option: item["value"]}, command.permissions
        )
        lines.append("  " + screen.offer(picked, item["name"]))
    write("\n".join(lines))
    return True


DESCRIPTION = """\
A local trial of the bot: the real bot against stand-ins of Discord, Agora and an LLM, all on 127.0.0.1 and without
any account. This terminal plays a Discord member (type help for the commands); call prints the link of the
call page, where you type instead of speaking. Set LLM_BASE_URL and LLM_API_KEY (and LLM_MODEL) to use a real model
instead of the scripted one."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 tasks.py demo", description=DESCRIPTION)
    parser.add_argument(
        "--data", type=Path, metavar="DIR", help="keep the bot's data in DIR (default: a folder deleted on quit)"
    )
    parser.add_argument(
        "--port",
        type=int,
        metavar="N",
        help=f"serve the call page on port N of 127.0.0.1 (default: {DEFAULT_WEB_PORT} when free, else any free port)",
    )
    parser.add_argument("--no-setup", action="store_true", help="use .venv as it is, without installing anything")
    args = parser.parse_args(argv)
    try:
        session = DemoSession(args.data, dict(os.environ), args.port)
    except BotDidNotStart as exc:
        write(f"The demo cannot start: {exc}")
        return 2
    return asyncio.run(run(session))


if __name__ == "__main__":
    sys.exit(main())
