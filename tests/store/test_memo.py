"""The bounded caches of computed text (bot.store.memo): same answers as the function, bounded, and nothing the
garbage collector walks once it has seen them."""

from __future__ import annotations

import functools
import gc
import types

import pytest

from bot.store.memo import Memo, memo


def test_a_memo_answers_as_the_function_and_computes_each_argument_once() -> None:
    calls: list[tuple[str, int]] = []

    @memo(maxsize=8)
    def shout(word: str, times: int) -> str:
        calls.append((word, times))
        return word.upper() * times

    assert [shout("a", 2), shout("b", 1), shout("a", 2)] == ["AA", "B", "AA"]
    assert calls == [("a", 2), ("b", 1)]
    assert shout.cache_info().currsize == 2
    shout.cache_clear()
    assert shout("a", 2) == "AA" and calls[-1] == ("a", 2)


def test_a_full_memo_keeps_what_was_computed_last() -> None:
    squares = Memo(lambda n: n * n, maxsize=10)
    for n in range(25):
        assert squares(n) == n * n
    assert squares.cache_info().currsize <= 10
    computed = []
    counted = Memo(lambda n: computed.append(n) or n, maxsize=10)
    for n in range(25):
        counted(n)
    computed.clear()
    counted(24)
    assert computed == [], "the latest entry is kept"
    with pytest.raises(ValueError):
        Memo(len, maxsize=1)


def test_a_full_memo_of_texts_gives_the_collector_nothing_to_walk() -> None:
    """What an ``lru_cache`` of the same entries costs every full collection: a walk of each key and result."""
    lines = [f"line {n}: my locker code is {1000 + n}" for n in range(5000)]
    texts = memo(maxsize=len(lines))(str.upper)
    counts = memo(maxsize=len(lines))(len)
    lru = functools.lru_cache(maxsize=len(lines))(str.upper)
    for line in lines:
        texts(line), counts(line), lru(line)
    gc.collect()
    assert [_walked(texts), _walked(counts)] == [[], []]
    assert len(gc.get_referents(lru)) >= len(lines), "the comparison: an lru_cache's entries are walked"


def _walked(cached: object) -> list[object]:
    """What a full collection walks for ``cached`` beyond the memo object, its attributes and its function: the
    tracked containers reachable from it."""
    found = []
    for attribute in gc.get_referents(cached):
        for held in gc.get_referents(attribute) if isinstance(attribute, dict) else ():
            if gc.is_tracked(held) and not isinstance(held, types.FunctionType | types.BuiltinFunctionType):
                found.append(held)
    return found
