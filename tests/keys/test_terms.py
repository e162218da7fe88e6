"""Search terms hashed per member: the encrypted index holds no word, and a query weighs each stem once."""

from __future__ import annotations

from bot.keys.crypto import MemberCipher, new_data_key
from bot.keys.terms import hashed_document
from bot.memory.service import MemoryService
from bot.store.repository import Store
from bot.store.terms import index_terms
from standins.factories import make_call


def test_a_hashed_document_holds_no_plain_term() -> None:
    cipher = MemberCipher(1, new_data_key())
    text = "Zebralocker renewal in Chicago"
    document = hashed_document(cipher, text)
    assert len(document.split()) == len(index_terms(text))
    for word in ("zebralock", "zebralocker", "renew", "renewal", "chicago", "Chicago"):
        assert word not in document
    assert cipher.term_hash("renew") in document.split()


async def test_a_query_weighs_each_stem_once_on_every_store(store: Store, memory: MemoryService) -> None:
    """Saying "schedule" and "scheduled" in one question counts that stem once, plain or encrypted, so the two
    paths rank alike (the encrypted one hashes stems, which cannot count twice)."""
    call = make_call(user_id=1, state="ended")
    await store.create_call(call)
    lines = ["I scheduled a service for the car", "The car is blue", "Lunch was good", "We talked about the weather"]
    await memory.record_snapshot(call, [("user", line) for line in lines], max_history=32)
    twice = await store.rank_turns(1, "schedule my car, scheduled", 10)
    once = await store.rank_turns(1, "schedule my car", 10)
    assert [t.content for t, _ in twice] == ["I scheduled a service for the car", "The car is blue"]
    assert [(t.content, round(s, 9)) for t, s in twice] == [(t.content, round(s, 9)) for t, s in once]
