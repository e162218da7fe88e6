"""Bounded caches of computed text (token counts, rendered lines, stems) that the garbage collector never walks.

``functools.lru_cache`` links every entry into a list that each full collection visits, key and result: four full
caches of 65,536 lines added some 20 ms to every full collection (measured), a pause that every voice turn on the
event loop waits out. A plain dictionary whose keys and values are strings, numbers and tuples of those is not
tracked by the collector at all once a collection has seen it (CPython untracks such tuples, then such
dictionaries). So ``memo`` keeps its entries in one dictionary and, when it is full, drops the older half
(in insertion order): no per-entry bookkeeping, and what was computed last stays.

Only for functions of hashable positional arguments whose results are strings, numbers or tuples of those: a
result the collector tracks (a set, a list, an object) would make the dictionary tracked again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, NamedTuple, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
_MISSING = object()


class MemoInfo(NamedTuple):
    maxsize: int
    currsize: int


class Memo(Generic[P, R]):
    """``function`` with its results kept for at most ``maxsize`` distinct arguments."""

    def __init__(self, function: Callable[P, R], maxsize: int) -> None:
        if maxsize < 2:
            raise ValueError("a memo holds at least two entries")
        self.__wrapped__ = function
        self.__doc__ = function.__doc__
        self.maxsize = maxsize
        self._values: dict[object, R] = {}

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if kwargs:
            return self.__wrapped__(*args, **kwargs)
        key: object = args[0] if len(args) == 1 else args
        value = self._values.get(key, _MISSING)
        if value is _MISSING:
            value = self.__wrapped__(*args, **kwargs)
            if len(self._values) >= self.maxsize:
                self._drop_older_half()
            self._values[key] = value
        return value  # type: ignore[return-value]  # _MISSING was replaced

    def _drop_older_half(self) -> None:
        kept = list(self._values.items())[len(self._values) // 2 :]
        self._values.clear()
        self._values.update(kept)

    def cache_clear(self) -> None:
        self._values.clear()

    def cache_info(self) -> MemoInfo:
        return MemoInfo(self.maxsize, len(self._values))


def memo(maxsize: int) -> Callable[[Callable[P, R]], Memo[P, R]]:
    """Decorator: ``@memo(maxsize=4096)``."""

    def wrap(function: Callable[P, R]) -> Memo[P, R]:
        return Memo(function, maxsize)

    return wrap


__all__ = ["Memo", "MemoInfo", "memo"]
