"""Room for identifiers in a query-aware block (bot.memory.identifiers): the lines holding a code or an account
number are kept, in room made to measure for the member, before the lines that share the question's words."""

from __future__ import annotations

import pytest

from bot.memory import identifiers
from bot.memory.block import BudgetedBlock
from bot.memory.identifiers import IdentifierLines, identifier_lines, keep_identifiers
from bot.memory.priors import line_priors
from bot.memory.service import MemoryService
from bot.memory.tokens import count_tokens
from bot.store.models import TurnRecord
from bot.store.repository import Store
from standins.factories import make_call
from tests.memory.test_context import DAY, T0, chatter, remember

USER = 77


def line(turn_id: int, text: str, at: float = T0, role: str = "user") -> TurnRecord:
    return TurnRecord(turn_id, USER, "c1", None, turn_id, role, text, at + turn_id, "voice")  # type: ignore[arg-type]


def test_the_lines_holding_an_identifier_most_specific_first_and_their_share_of_the_words() -> None:
    recent = [
        line(1, "We talked about the garden"),
        line(2, "My booking code is QX-20931"),
        line(3, "The account is 7789-4456-901 and Anna from Lisbon opened it on Friday"),
        line(4, "Reference number WT-89045", role="assistant"),
        line(5, "See you at 3:00 for $35"),
    ]
    found = identifier_lines(recent, line_priors(recent))
    assert [t.turn_id for t in found.lines] == [3, 2, 4], "most specifics first; a time or a small sum is none"
    held = sum(count_tokens(recent[at].content) for at in (1, 2, 3))
    assert found.share == pytest.approx(held / sum(count_tokens(t.content) for t in recent))
    kept: dict[str, object] = {}
    assert identifier_lines(recent, line_priors(recent), kept) == found
    assert identifier_lines(recent[:1], {}, kept) is kept["identifier lines"], "worked out once per member index"
    assert identifier_lines(recent[:1], {}) == IdentifierLines((), 0.0)


def test_the_lines_are_kept_within_their_room_and_the_block_gets_its_whole_budget_back() -> None:
    recent = [line(n, f"Confirmation {n} is AB-{10000 + n} for the {n}th booking") for n in range(1, 30)]
    block = BudgetedBlock(1000)
    before = block.used
    keep_identifiers(block, IdentifierLines(tuple(recent), 0.1))
    assert 0 < block.used - before <= 1000 * identifiers.IDENTIFIER_ROOM * 0.1
    assert block.budget == 1000 and not block.full
    keep_identifiers(empty := BudgetedBlock(1000), IdentifierLines(tuple(recent), 0.0))
    assert empty.empty, "no room for a member who holds no identifiers"
    keep_identifiers(most := BudgetedBlock(1000), IdentifierLines(tuple(recent), 0.9))
    assert most.used - before <= 1000 * identifiers.IDENTIFIER_ROOM_MAX


WIRE = [
    "The wire transfer for my daughter's house should go out soon",
    "Can the wire transfer for the house go out before the closing?",
    "My daughter's house closing needs the wire transfer confirmed",
    "Is the wire transfer for my daughter still on schedule for the house?",
    "I want the wire transfer to my daughter split in two for the house",
    "Let's keep the wire transfer for the house as one payment to my daughter",
    "The status of the transfer worries my daughter, the house is her dream",
    "Wire transfers this large for a house need a second signature",
    "My husband wants to change the wire transfer for our daughter's house",
    "The current transfer covers the house repairs my daughter found",
    "A wire transfer cannot be undone once the house funds leave",
    "The transfer status page for the house wire was blank for my daughter",
]
ACCOUNT = "Her account at Chase is 7789-4456-901, routing 021000021."
REFERENCE = "Your reference number is WT-89045."


@pytest.mark.parametrize("room", [True, False], ids=["room for identifiers", "no room"])
async def test_a_question_about_the_state_of_things_keeps_the_account_number_it_does_not_name(
    store: Store, memory: MemoryService, monkeypatch: pytest.MonkeyPatch, room: bool
) -> None:
    """Two calls about a wire transfer to the member's daughter; the daughter's account number said once, in words the
    question does not use, and the transfer's reference number said between two lines that match it. Asked for the
    transfer's status, a small block holds both, on the stored and the live path; with no room for identifiers, the
    reference number still comes in beside the lines it was said between, and the account number does not: the
    lines that repeat the question's words fill the block."""
    if not room:
        monkeypatch.setattr(identifiers, "IDENTIFIER_ROOM", 0.0)
    said = [("user" if n % 2 == 0 else "assistant", text) for n, text in enumerate(WIRE)]
    await remember(store, memory, USER, [*said[:3], ("assistant", ACCOUNT), *said[3:6], *chatter(4)], T0)
    await remember(store, memory, USER, [*said[6:9], ("assistant", REFERENCE), *said[9:], *chatter(4)], T0 + DAY)
    live = make_call(USER, state="active", started_at=T0 + 2 * DAY)
    await store.create_call(live)
    question = "What's the current status of the wire transfer for my daughter's house?"
    stored = (await memory.build_context(USER, query=question, budget_tokens=300))[1]["content"]
    during_call = await memory.build_context(USER, query=question, budget_tokens=250, exclude_call_id=live.call_id)
    for block in (stored, during_call[1]["content"]):
        assert "wire transfer" in block
        assert ("7789-4456-901" in block) is room
        assert "WT-89045" in block


async def test_a_member_who_says_few_identifiers_gets_the_same_block_as_without_the_room(
    store: Store, memory: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One model number in a life's worth of talk (as in LoCoMo's real conversations) makes no room: the block for a
    question it has nothing to do with is the same as without the rule, and room for it would have brought it."""
    bakery = [("user", f"My sister's bakery sold {kind} bread today") for kind in ("rye", "spelt", "olive", "seeded")]
    guitar = "My guitar is a 1968 Kustom K-200A"
    await remember(store, memory, USER, [*chatter(50), *bakery, *chatter(10), ("user", guitar), *chatter(50)], T0)
    question = "How is my sister's bakery doing?"
    blocks = []
    for room in (identifiers.IDENTIFIER_ROOM, 0.0, 1000.0):
        monkeypatch.setattr(identifiers, "IDENTIFIER_ROOM", room)
        memory.context.forget()
        blocks.append((await memory.build_context(USER, query=question, budget_tokens=150))[1]["content"])
    assert blocks[0] == blocks[1]
    assert "bakery sold rye" in blocks[0]
    assert (guitar in blocks[0], guitar in blocks[2]) == (False, True)
