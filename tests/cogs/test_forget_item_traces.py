"""/forget item makes the agent forget: the fact, the member's lines it was drawn from and the summaries that
repeat it, after the member confirmed what else goes; `python -m bot context USER` no longer contains it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from bot.memory.importer import Conversation, import_conversations
from standins.factories import seed_fact, seed_summary
from standins.harness import CallWorld

T0 = 1_780_000_000.0
ROOT = Path(__file__).resolve().parents[2]


async def context_of(world: CallWorld, user_id: int, tmp_path: Path) -> str:
    """What `python -m bot context USER` prints for this database (run as the command a host would type)."""
    config = tmp_path / "context.toml"
    config.write_text(f'[memory]\ndatabase_path = "{world.settings.memory.database_path}"\n')
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "--config",
        str(config),
        "context",
        str(user_id),
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def seed(world: CallWorld, user_id: int) -> int:
    [call_id] = await import_conversations(
        world.store,
        world.memory,
        user_id,
        [
            Conversation(
                T0,
                [
                    ("user", "My cat is called Pixel."),
                    ("assistant", "Pixel is a lovely name for a cat!"),
                    ("user", "I work as a nurse in Leeds."),
                    ("assistant", "That sounds demanding."),
                ],
            )
        ],
    )
    await seed_summary(world.store, "Talked about their cat Pixel and nursing work.", call_id=call_id)
    fact = await seed_fact(world.store, user_id, "Has a cat called Pixel", T0, call_id=call_id)
    await seed_fact(world.store, user_id, "Works as a nurse in Leeds", T0, call_id=call_id)
    return fact.fact_id


async def test_forgetting_a_fact_asks_then_removes_its_lines_and_summary_from_the_context(
    simcord_env, world: CallWorld, member, tmp_path: Path
) -> None:
    _, channel, alice = member
    fact_id = await seed(world, alice.id)
    assert "Pixel" in await context_of(world, alice.id, tmp_path)

    asked = await alice.slash(channel, "forget item", item=str(fact_id))
    prompt = asked.response
    assert asked.ephemeral
    assert "Forget “Has a cat called Pixel”?" in prompt.content
    assert "2 lines of your conversations and 1 conversation summary" in prompt.content
    assert await world.store.count_facts(alice.id) == 2, "nothing is deleted before the member confirms"

    await alice.click(prompt, label="Forget it")

    assert prompt.content == (
        "Forgot 1 fact: “Has a cat called Pixel”, with 2 lines of your conversations and 1 conversation summary "
        "that repeated it."
    )
    assert [f.text for f in await world.store.list_facts(alice.id)] == ["Works as a nurse in Leeds"]
    context = await context_of(world, alice.id, tmp_path)
    assert "Pixel" not in context
    assert "nurse in Leeds" in context, "what was not about the fact stays"


async def test_a_fact_nothing_else_repeats_is_forgotten_after_a_confirmation_too(
    simcord_env, world: CallWorld, member
) -> None:
    """The README promises that /forget asks first, saying what goes: a fact that goes alone is no exception."""
    _, channel, alice = member
    fact = await seed_fact(world.store, alice.id, "Plays the cello", T0)

    asked = await alice.slash(channel, "forget item", item=str(fact.fact_id))

    assert asked.ephemeral
    assert asked.response.content == "**Forget “Plays the cello”?** It can't be undone."
    assert await world.store.count_facts(alice.id) == 1, "nothing is deleted before the member confirms"
    await alice.click(asked.response, label="Forget it")
    assert asked.response.content == "Forgot 1 fact: “Plays the cello”"
    assert await world.store.count_facts(alice.id) == 0


async def test_cancelling_the_confirmation_keeps_everything(simcord_env, world: CallWorld, member) -> None:
    _, channel, alice = member
    fact_id = await seed(world, alice.id)
    prompt = (await alice.slash(channel, "forget item", item=str(fact_id))).response

    await alice.click(prompt, label="Cancel")

    assert prompt.content == "Cancelled: nothing was forgotten."
    assert await world.store.count_facts(alice.id) == 2
    assert await world.store.count_turns(alice.id) == 4


async def test_the_memory_panel_picker_asks_too_and_refreshes_the_panel(
    simcord_env, world: CallWorld, member, tmp_path: Path
) -> None:
    _, channel, alice = member
    await seed(world, alice.id)
    shown = await alice.slash(channel, "memory")
    [picker] = (await alice.click(shown.response, label="Forget…")).followups
    menu = next(c for row in picker.components for c in row["components"] if c["type"] == 3)
    pixel = next(o["value"] for o in menu["options"] if o["label"] == "Has a cat called Pixel")

    asked = await alice.select(picker, [pixel])
    assert "also deletes 2 lines of your conversations" in asked.response.content
    done = await alice.click(asked.response, label="Forget it")

    assert done.response.content.startswith("Forgot 1 fact: “Has a cat called Pixel”, with 2 lines")
    assert "Pixel" not in shown.response.embeds[0].description  # the panel was refreshed
    assert "Pixel" not in await context_of(world, alice.id, tmp_path)
