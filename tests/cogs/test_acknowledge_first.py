"""Discord's 3-second rule: every command and button answers Discord before it touches the database.

Discord shows "The application did not respond" when an interaction is not acknowledged within 3 seconds, while
a write to SQLite waits up to 5 s (``memory.lock_timeout_seconds``) for another writer: a `/settings` write was
measured at 4.04 s behind one. So every command and button acknowledges first (a deferred, ephemeral
"thinking…" message for commands, a deferred update for buttons, or the message edit itself when nothing is
read first) and reads or writes afterwards.

The test holds the database's write lock for 4 s from a second connection (``BEGIN IMMEDIATE``, as an
``sqlite3`` shell or a backup would) and runs every command and button at once meanwhile, over real HTTP and
a real gateway connection to the loopback fake Discord. A write of the bot's own is already waiting for the
lock, as when a call's lines are being stored; the bot's reads queue behind it (one connection for its writes
and reads), so a command that read before acknowledging would be caught too (in WAL mode a read alone is not
blocked by another program's write lock). Each interaction's first callback must reach the fake while the lock
is still held, within 3 s; the answer the member finally sees must come after the lock is released and be the
right one, and the database must hold what the commands wrote.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import discord
import pytest

from bot.i18n import english
from bot.store.models import ChatRecord
from standins.discord_gateway import (
    CHANNEL_MESSAGE,
    DEFERRED_CHANNEL_MESSAGE,
    DEFERRED_UPDATE,
    EPHEMERAL,
    MODAL,
    UPDATE_MESSAGE,
    FakeDiscord,
)
from standins.factories import seed_fact
from standins.harness import CallWorld, settled
from standins.llm_server import FakeLLM
from tests.cogs.conftest import SimBot

EXPORT_READY, MEMORY_ON, MEMORY_PAUSED, PICK_PROMPT = (
    english()(key) for key in ("memory.export_ready", "memory.on", "memory.paused", "memory.pick_prompt")
)

HOLD_SECONDS = 4.0
DISCORD_SECONDS = 3.0
"""Discord's limit for the first answer to an interaction."""
SETUP_SECONDS = 20.0
"""How long setup waits for an answer (a loaded machine can be slow; nothing is locked then)."""
MANAGE_SERVER = "32"
T0 = 1_780_000_000.0
CHAT_REPLY = "Hello from the agent."

Response = tuple[str, Any]


# ---- another program holding the write lock ----------------------------------------------------------------


class WriteLock:
    """A second connection to the bot's database: ``BEGIN IMMEDIATE``, then ``COMMIT`` ``seconds`` later, in a
    thread (a failing test releases it at once)."""

    def __init__(self, path: Path, seconds: float):
        self.path, self.seconds = path, seconds
        self.acquired = threading.Event()
        self.released = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._hold, name="write-lock", daemon=True)

    @property
    def held(self) -> bool:
        return self.acquired.is_set() and not self.released.is_set()

    def _hold(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=10)
        try:
            conn.execute("BEGIN IMMEDIATE")
            self.acquired.set()
            self._stop.wait(self.seconds)
            conn.execute("COMMIT")
        finally:
            self.released.set()
            conn.close()

    async def __aenter__(self) -> WriteLock:
        self._thread.start()
        assert await asyncio.to_thread(self.acquired.wait, 10), "could not take the database's write lock"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        await asyncio.to_thread(self._thread.join, 10)


# ---- the bot on the loopback fake Discord ------------------------------------------------------------------


def components(message: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for row in message.get("components") or []:
        yield from row.get("components") or []


def labels(message: Mapping[str, Any]) -> list[str]:
    return [c["label"] for c in components(message) if c.get("type") == 2]


@dataclass
class Scene:
    """Members acting on the fake Discord; each case uses a member of its own, so cases run side by side."""

    fake: FakeDiscord
    world: CallWorld
    next_user: int = 5_000

    def member(self) -> int:
        self.next_user += 1
        return self.next_user

    async def answered(self, token: str) -> None:
        """Setup before the lock: wait for the answer (after the acknowledgement, when it was deferred)."""
        kind, body = await self.fake.next_response(token, timeout=SETUP_SECONDS)
        assert kind == "callback", (kind, body)
        if body["type"] in (DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE):
            await self.fake.next_response(token, timeout=SETUP_SECONDS)

    async def command(self, name: str, user: int, **options: Any) -> None:
        await self.answered(await self.fake.slash(name, user, options))

    async def click(self, user: int, custom_id: str) -> None:
        await self.answered(await self.fake.click(self.message_with(custom_id), custom_id, user))

    def message_with(self, custom_id: str) -> dict[str, Any]:
        """The newest message carrying the component ``custom_id`` (the one the member sees)."""
        found = [m for m in self.fake.messages.values() if any(c.get("custom_id") == custom_id for c in components(m))]
        assert found, f"no message has a component {custom_id!r}"
        return found[-1]

    async def facts(self, user: int, *texts: str) -> list[int]:
        return [(await seed_fact(self.world.store, user, text, T0 + n)).fact_id for n, text in enumerate(texts)]

    async def chat_with_lines(self, user: int) -> str:
        chat_id = f"chat-{user}"
        await self.world.store.create_chat(ChatRecord(chat_id, user, None, False, T0, T0, ended_at=T0 + 5))
        for n, (role, content) in enumerate([("user", "Tell me about tides."), ("assistant", "Gladly.")]):
            await self.world.store.append_chat_turn(chat_id, user, role, content, T0 + n)
        return chat_id


Check = Callable[[list[Response]], None]


def one_answer(answers: list[Response]) -> bool:
    return len(answers) == 1


@dataclass
class Case:
    name: str
    push: Callable[[], Awaitable[str]]
    first: int
    """The callback type Discord must receive first."""
    check: Check
    """The member's answer: the responses after the callback."""
    waits: bool = True
    """Whether the answer needs the database (so it can only come after the lock is released)."""
    complete: Callable[[list[Response]], bool] = one_answer
    """Whether the answer is complete (a streamed chat answer takes several edits)."""


@dataclass
class Seen:
    token: str
    first: Response
    first_held: bool
    first_seconds: float
    answers: list[Response]
    answer_held: bool


async def run_case(fake: FakeDiscord, lock: WriteLock, case: Case) -> Seen:
    token = await case.push()
    pushed = time.monotonic()
    first = await fake.next_response(token, timeout=HOLD_SECONDS + 10)
    first_held, first_seconds = lock.held, time.monotonic() - pushed
    if first[1]["type"] != case.first and first[1]["type"] in (CHANNEL_MESSAGE, UPDATE_MESSAGE):
        return Seen(token, first, first_held, first_seconds, [first], first_held)  # answered without deferring
    if first[1]["type"] == MODAL:
        return Seen(token, first, first_held, first_seconds, [], first_held)  # a modal is the whole answer
    answers = [await fake.next_response(token, timeout=HOLD_SECONDS + 10)]
    answer_held = lock.held
    while not case.complete(answers):
        answers.append(await fake.next_response(token))
    return Seen(token, first, first_held, first_seconds, answers, answer_held)


def content(kind: str, *expected: str) -> Check:
    def check(answers: list[Response]) -> None:
        [(got, body)] = answers
        assert got == kind, f"answered with {got}, expected {kind}"
        for text in expected:
            assert text in (body.get("content") or ""), f"{text!r} not in {body.get('content')!r}"

    return check


def embed(kind: str, *expected: str, buttons: tuple[str, ...] = ()) -> Check:
    def check(answers: list[Response]) -> None:
        [(got, body)] = answers
        assert got == kind, f"answered with {got}, expected {kind}"
        [shown] = body["embeds"]
        text = f"{shown.get('description')}\n{shown.get('footer', {}).get('text')}"
        for part in expected:
            assert part in text, f"{part!r} not in {text!r}"
        for label in buttons:
            assert label in labels(body), f"no {label!r} button in {labels(body)}"

    return check


def streamed(kind: str, text: str) -> Check:
    """A chat answer: opened with ``kind`` (the deferred message's edit, or a followup), then edited to ``text``."""

    def check(answers: list[Response]) -> None:
        assert answers[0][0] == kind, f"answered with {answers[0][0]}, expected {kind}"
        assert all(k == "edit" for k, _ in answers[1:]), answers
        assert answers[-1][1]["content"] == text

    return check


def no_answer(answers: list[Response]) -> None:
    assert answers == [], f"answered {answers} besides the modal"


def chat_complete(answers: list[Response]) -> bool:
    return (answers[-1][1] or {}).get("content") == CHAT_REPLY


# ---- the test -----------------------------------------------------------------------------------------------


async def test_every_command_and_button_acknowledges_before_touching_the_database(
    bot: SimBot, fake: FakeDiscord, world: CallWorld, fake_llm: FakeLLM
) -> None:
    scene = Scene(fake, world)
    store = world.store
    guild_id = int(fake.guild_id)
    cases: list[Case] = []

    def slash(name: str, user: int, subcommand: str | None = None, permissions: str = "0", **options: Any):
        return lambda: fake.slash(name, user, options, subcommand, permissions)

    def click(user: int, custom_id: str, values: list[str] | None = None):
        message = scene.message_with(custom_id)  # as shown before the lock
        return lambda: fake.click(message, custom_id, user, values=values)

    # /memory and /forget everything
    user = scene.member()
    await store.set_consent(user, True, T0)
    await scene.facts(user, "Plays the cello")
    cases.append(
        Case(
            "/memory",
            slash("memory", user),
            DEFERRED_CHANNEL_MESSAGE,
            embed("edit", "Plays the cello", "Page 1 of 1", buttons=("Export", "Pause memory")),
        )
    )
    user = scene.member()
    await scene.facts(user, "Has a dog", "Likes rain")
    cases.append(
        Case(
            "/forget everything",
            slash("forget", user, "everything"),
            DEFERRED_CHANNEL_MESSAGE,
            content("edit", "**Forget everything?**", "(2 facts, 0 calls and chats)"),
        )
    )

    # every /settings subcommand (one admin; the writes change different settings)
    admin = scene.member()
    for sub, options, check in [
        ("show", {}, content("followup", "**Bot settings for this server**")),
        ("calls", {"enabled": True}, content("followup", "Voice calls are now **on**")),
        ("persona", {"text": "You are a patient tutor."}, content("followup", "> You are a patient tutor.")),
        ("greeting", {}, content("followup", "This server uses the bot's **default greeting**")),
        ("max-minutes", {"minutes": 15}, content("followup", "at most **15 minutes**")),
        ("daily-calls", {"count": 40}, content("followup", "**40 calls per day**")),
        ("retention", {"days": 30}, content("followup", "**deleted 30 days after**")),
    ]:
        cases.append(
            Case(
                f"/settings {sub}",
                slash("settings", admin, sub, MANAGE_SERVER, **options),
                DEFERRED_CHANNEL_MESSAGE,
                check,
            )
        )

    # the memory panel's buttons
    many = [f"Fact number {n:02d}" for n in range(9)]  # 8 per page: two pages
    user = scene.member()
    await scene.facts(user, *many)
    await scene.command("memory", user)
    cases.append(
        Case(
            "panel ▶",
            click(user, f"memory:next:{user}:0"),
            DEFERRED_UPDATE,
            embed("edit", "Page 2 of 2", "Fact number 00"),
        )
    )
    user = scene.member()
    await scene.facts(user, *many)
    await scene.command("memory", user)
    await scene.click(user, f"memory:next:{user}:0")
    cases.append(
        Case(
            "panel ◀",
            click(user, f"memory:prev:{user}:1"),
            DEFERRED_UPDATE,
            embed("edit", "Page 1 of 2", "Fact number 08"),
        )
    )
    paused = scene.member()
    await store.set_consent(paused, True, T0)
    await scene.facts(paused, "Drinks oat milk")
    await scene.command("memory", paused)
    cases.append(
        Case(
            "panel Pause memory",
            click(paused, f"memory:toggle:{paused}:0"),
            DEFERRED_UPDATE,
            embed("edit", MEMORY_PAUSED, buttons=("Resume memory",)),
        )
    )
    resumed = scene.member()
    await store.set_consent(resumed, True, T0)
    await scene.facts(resumed, "Runs on Sundays")
    await store.set_memory_enabled(resumed, False, T0)
    await scene.command("memory", resumed)
    cases.append(
        Case(
            "panel Resume memory",
            click(resumed, f"memory:toggle:{resumed}:0"),
            DEFERRED_UPDATE,
            embed("edit", MEMORY_ON, buttons=("Pause memory",)),
        )
    )
    user = scene.member()
    await scene.facts(user, "Collects stamps")
    await scene.command("memory", user)
    cases.append(
        Case("panel Export", click(user, f"memory:export:{user}:0"), DEFERRED_UPDATE, content("followup", EXPORT_READY))
    )
    user = scene.member()
    await scene.facts(user, "Knits scarves")
    await scene.command("memory", user)
    cases.append(
        Case(
            "panel Forget…",
            click(user, f"memory:forget:{user}:0"),
            DEFERRED_UPDATE,
            content("followup", PICK_PROMPT),
            waits=False,  # the picker lists the page the panel already shows: nothing to read
        )
    )

    # /remember, and Edit a fact… in the panel: its modal opens at once (the live panel holds the text), and its
    # submission is acknowledged before the edit is written
    teller = scene.member()
    await store.set_consent(teller, True, T0)
    cases.append(
        Case(
            "/remember",
            slash("remember", teller, text="Plays the oboe"),
            DEFERRED_CHANNEL_MESSAGE,
            content("followup", "Got it, I'll remember: “Plays the oboe”"),
        )
    )
    opener = scene.member()
    [open_id] = await scene.facts(opener, "Plays the harp")
    await scene.command("memory", opener)
    cases.append(
        Case(
            "panel Edit a fact…",
            click(opener, f"memory:edit:{opener}", [str(open_id)]),
            MODAL,
            no_answer,
            waits=False,
        )
    )
    editor = scene.member()
    await store.set_consent(editor, True, T0)
    [edit_id] = await scene.facts(editor, "Plays the violin")
    await scene.command("memory", editor)
    opened = await fake.click(
        scene.message_with(f"memory:edit:{editor}"), f"memory:edit:{editor}", editor, values=[str(edit_id)]
    )
    assert (await fake.next_response(opened, timeout=SETUP_SECONDS))[1]["type"] == MODAL
    cases.append(
        Case(
            "edit modal: submit",
            lambda: fake.submit_modal(f"fact:modal:{editor}:{edit_id}", editor, {"fact": "Plays the viola"}),
            DEFERRED_CHANNEL_MESSAGE,
            content("edit", "Updated: “Plays the viola”"),
        )
    )

    # what Forget… opens: pick one fact, pick one conversation, forget everything (and its confirmation)
    forgot_fact = scene.member()
    [fact_id] = await scene.facts(forgot_fact, "Speaks Dutch")
    await scene.command("memory", forgot_fact)
    await scene.click(forgot_fact, f"memory:forget:{forgot_fact}:0")
    cases.append(
        Case(
            "picker: a fact",
            click(forgot_fact, f"forget:pick:{forgot_fact}", [f"fact:{fact_id}"]),
            DEFERRED_UPDATE,
            content("edit", "**Forget “Speaks Dutch”?** It can't be undone."),
        )
    )
    confirmed_fact = scene.member()
    [confirmed_fact_id] = await scene.facts(confirmed_fact, "Knits socks")
    await scene.answered(await fake.slash("forget", confirmed_fact, {"item": str(confirmed_fact_id)}, "item"))
    cases.append(
        Case(
            "confirm: Forget it",
            click(confirmed_fact, f"forget:fact:{confirmed_fact}:{confirmed_fact_id}"),
            DEFERRED_UPDATE,
            content("edit", "Forgot 1 fact: “Knits socks”"),
        )
    )
    forgot_chat = scene.member()
    chat_id = await scene.chat_with_lines(forgot_chat)
    await scene.command("memory", forgot_chat)
    await scene.click(forgot_chat, f"memory:forget:{forgot_chat}:0")
    cases.append(
        Case(
            "picker: a chat",
            click(forgot_chat, f"forget:pick:{forgot_chat}", [f"chat:{chat_id}"]),
            DEFERRED_UPDATE,
            content("edit", "**Forget your chat of", "This deletes 2 lines."),
        )
    )
    confirmed_chat = scene.member()
    confirmed_chat_id = await scene.chat_with_lines(confirmed_chat)
    await scene.answered(await fake.slash("forget", confirmed_chat, {"call": f"chat:{confirmed_chat_id}"}, "call"))
    cases.append(
        Case(
            "confirm: Forget this chat",
            click(confirmed_chat, f"forget:convo:{confirmed_chat}:chat:{confirmed_chat_id}"),
            DEFERRED_UPDATE,
            content("edit", "Forgot your chat of", "2 lines"),
        )
    )
    user = scene.member()
    await scene.facts(user, "Bakes bread")
    await scene.command("memory", user)
    await scene.click(user, f"memory:forget:{user}:0")
    cases.append(
        Case(
            "picker: Forget everything…",
            click(user, f"forget:everything:{user}"),
            DEFERRED_UPDATE,
            content("edit", "**Forget everything?**", "(1 fact, 0 calls and chats)"),
        )
    )
    forgot_all = scene.member()
    await scene.facts(forgot_all, "Sings in a choir", "Owns a kayak")
    await scene.command("memory", forgot_all)
    await scene.click(forgot_all, f"memory:forget:{forgot_all}:0")
    await scene.click(forgot_all, f"forget:everything:{forgot_all}")
    cases.append(
        Case(
            "confirm: Forget everything",
            click(forgot_all, f"forget:confirm:{forgot_all}"),
            DEFERRED_UPDATE,
            content("edit", "Forgot everything: 0 calls, 2 chats, 0 lines, 2 facts."),
        )
    )

    # /forget item and /forget call
    item_user = scene.member()
    [item_id] = await scene.facts(item_user, "Grows tomatoes")
    cases.append(
        Case(
            "/forget item",
            slash("forget", item_user, "item", item=str(item_id)),
            DEFERRED_CHANNEL_MESSAGE,
            content("followup", "**Forget “Grows tomatoes”?** It can't be undone."),
        )
    )
    call_user = scene.member()
    forget_chat_id = await scene.chat_with_lines(call_user)
    cases.append(
        Case(
            "/forget call",
            slash("forget", call_user, "call", call=f"chat:{forget_chat_id}"),
            DEFERRED_CHANNEL_MESSAGE,
            content("followup", "**Forget your chat of", "This deletes 2 lines."),
        )
    )

    # /call, its memory choice, Hang up and /hangup
    caller = scene.member()
    await store.set_consent(caller, True, T0)
    cases.append(
        Case("/call", slash("call", caller), DEFERRED_CHANNEL_MESSAGE, content("followup", "**Your call is ready.**"))
    )
    chooser = scene.member()
    await scene.command("call", chooser)  # asks for the memory choice
    cases.append(
        Case(
            "/call: Remember me",
            click(chooser, f"consent:remember:call:{chooser}"),
            UPDATE_MESSAGE,
            content("edit", "**Your call is ready.**"),
        )
    )
    hanging = scene.member()
    await store.set_consent(hanging, True, T0)
    await scene.command("call", hanging)
    hanging_call = await store.open_call_for_user(hanging)
    assert hanging_call is not None
    cases.append(
        Case(
            "card: Hang up",
            click(hanging, f"call:hangup:{hanging_call.call_id}:{hanging}"),
            DEFERRED_UPDATE,
            content("edit", "**Call ended.**"),
        )
    )
    hangup_user = scene.member()
    await store.set_consent(hangup_user, True, T0)
    await scene.command("call", hangup_user)
    cases.append(
        Case("/hangup", slash("hangup", hangup_user), DEFERRED_CHANNEL_MESSAGE, content("followup", "**Call ended.**"))
    )

    # members who reach the bot only through their own install (issue 40), where no server added it
    for place in ("server without the bot", "dm", "group dm"):
        outsider = scene.member()
        fake.install_for_user(outsider, member_of_server=False)
        await store.set_consent(outsider, True, T0)
        cases.append(
            Case(
                f"/call in a {place}",
                lambda outsider=outsider, place=place: fake.slash("call", outsider, place=place),
                DEFERRED_CHANNEL_MESSAGE,
                content("followup", "**Your call is ready.**"),
            )
        )
    outsider = scene.member()
    fake.install_for_user(outsider, member_of_server=False)
    await scene.facts(outsider, "Rides a tandem")
    cases.append(
        Case(
            "/memory in a group dm",
            lambda: fake.slash("memory", outsider, place="group dm"),
            DEFERRED_CHANNEL_MESSAGE,
            embed("edit", "Rides a tandem"),
        )
    )

    # /chat and its memory choice
    chatter = scene.member()
    await store.set_consent(chatter, True, T0)
    cases.append(
        Case(
            "/chat",
            slash("chat", chatter, message="Hi there"),
            DEFERRED_CHANNEL_MESSAGE,
            streamed("edit", CHAT_REPLY),
            complete=chat_complete,
        )
    )
    new_chatter = scene.member()
    await scene.command("chat", new_chatter, message="Hi, first time")  # asks for the memory choice
    cases.append(
        Case(
            "/chat: Remember me",
            click(new_chatter, f"consent:remember:chat:{new_chatter}"),
            UPDATE_MESSAGE,
            streamed("followup", CHAT_REPLY),
            complete=chat_complete,
        )
    )
    fake_llm.queue_reply(CHAT_REPLY)
    fake_llm.queue_reply(CHAT_REPLY)

    # ---- everything at once, while another program holds the write lock ----
    started = time.monotonic()
    async with WriteLock(world.settings.memory.database_path, HOLD_SECONDS) as lock:
        queued_write = asyncio.create_task(store.set_meta("test.queued_write", "waits for the lock"))
        await asyncio.sleep(0)  # it now holds the store's connection, waiting for the lock
        seen = await asyncio.gather(*(run_case(fake, lock, case) for case in cases))
        await queued_write
    assert time.monotonic() - started < HOLD_SECONDS + 5

    problems = []
    for case, s in zip(cases, seen, strict=True):
        kind, body = s.first
        if not s.first_held:
            problems.append(f"{case.name}: its first answer reached Discord only after the lock was released")
        if s.first_seconds >= DISCORD_SECONDS:
            problems.append(f"{case.name}: its first answer took {s.first_seconds:.2f} s")
        if (kind, body["type"]) != ("callback", case.first):
            problems.append(f"{case.name}: first answer {kind} type {body.get('type')}, expected {case.first}")
        elif case.first == DEFERRED_CHANNEL_MESSAGE and not body["data"]["flags"] & EPHEMERAL:
            problems.append(f"{case.name}: the deferred answer is not ephemeral")
        if case.waits and s.answer_held:
            problems.append(f"{case.name}: answered while the lock was held (the test did not make it wait)")
        try:
            case.check(s.answers)
        except AssertionError as error:
            problems.append(f"{case.name}: {error}")
    assert not problems, "\n".join(problems)

    # what the commands wrote
    settings = await store.get_guild_settings(guild_id)
    assert settings.calls_enabled and settings.persona == "You are a patient tutor."
    assert (settings.max_call_minutes, settings.calls_per_member_per_day, settings.retention_days) == (15, 40, 30)
    assert (await store.get_user(paused)).memory_enabled is False
    assert (await store.get_user(resumed)).memory_enabled is True
    for user in (confirmed_fact, forgot_all):
        assert await store.count_facts(user, include_superseded=True) == 0
    for user in (forgot_fact, item_user):
        assert await store.count_facts(user, include_superseded=True) == 1, "asked first: nothing went yet"
    assert await store.get_chat(confirmed_chat_id) is None
    assert await store.get_chat(chat_id) is not None and await store.get_chat(forget_chat_id) is not None, "asked only"
    assert (await store.get_user(chooser)).consent == "remember"
    assert (await store.get_user(new_chatter)).consent == "remember"
    assert [(f.text, f.told) for f in await store.list_facts(teller)] == [("Plays the oboe", True)]
    assert [f.text for f in await store.list_facts(editor)] == ["Plays the viola"]
    assert [f.text for f in await store.list_facts(editor, superseded_only=True)] == ["Plays the violin"]
    assert fake.modals[f"fact:modal:{opener}:{open_id}"]["title"] == "Edit what I remember"
    assert [f.text for f in await store.list_facts(opener)] == ["Plays the harp"]
    assert await store.open_call_for_user(caller) is not None
    assert await store.open_call_for_user(chooser) is not None
    assert await store.open_call_for_user(hanging) is None and await store.open_call_for_user(hangup_user) is None

    # nothing failed and nothing else was sent (an error after the answer would be one more message)
    await settled(lambda: sum(len(sent) for sent in fake.responses.values()), quiet=0.2)
    assert (await world.monitor.report())["counters"]["errors"] == {}
    for case, s in zip(cases, seen, strict=True):
        assert len(fake.responses[s.token]) == 1 + len(s.answers), (case.name, fake.responses[s.token])


# ---- an error after the acknowledgement -------------------------------------------------------------------


def database_locked(*args: object, **kwargs: object) -> None:
    raise sqlite3.OperationalError("database is locked")  # the lock outlasted memory.lock_timeout_seconds


async def test_an_error_after_the_acknowledgement_is_an_ephemeral_followup(
    simcord_env, world: CallWorld, member, monkeypatch: pytest.MonkeyPatch
) -> None:
    guild, channel, alice = member
    admins = guild.create_role("Admins", permissions=discord.Permissions(manage_guild=True))
    carol = guild.add_member(simcord_env.create_user("carol"), roles=[admins])
    await world.store.set_consent(alice.id, True, T0)
    await seed_fact(world.store, alice.id, "Plays the cello", T0)
    panel = await alice.slash(channel, "memory")
    monkeypatch.setattr(world.store, "update_guild_settings", database_locked)
    monkeypatch.setattr(world.store, "set_memory_enabled", database_locked)

    result = await carol.slash(channel, "settings max-minutes", minutes=15)
    assert result.ephemeral and result.response.content == english()("errors.something_went_wrong")
    assert isinstance(simcord_env.errors[-1].original, sqlite3.OperationalError)

    clicked = await alice.click(panel.response, label="Pause memory")
    [told] = clicked.followups
    assert told.ephemeral and told.content == english()("errors.something_went_wrong")
    assert "Memory is **on**" in panel.response.embeds[0].description  # the panel is unchanged
    assert (await world.store.get_user(alice.id)).memory_enabled
    assert (await world.monitor.report())["counters"]["errors"] == {"OperationalError": 2}
