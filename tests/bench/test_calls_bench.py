"""A quick run of the call benchmark (emulator in a subprocess) and the checks it reports on."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from bench.calls import batches_of, check_turns, main, percentile
from bot.memory.service import MemoryService


def test_turn_check_counts_lost_duplicated_and_order() -> None:
    expected = [("assistant", "hi"), ("user", "a"), ("assistant", "b")]
    assert check_turns(expected, list(expected)) == (0, 0, True)
    assert check_turns(expected, expected[:2]) == (1, 0, False)
    assert check_turns(expected, [*expected, ("user", "a")]) == (0, 1, False)
    assert check_turns(expected, [expected[0], expected[2], expected[1]]) == (0, 0, False)
    assert check_turns(expected, [expected[0], ("user", "A"), expected[2]]) == (1, 1, False)


def test_percentiles_are_nearest_rank_and_batches_cover_every_turn() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 99) == 99.0 and percentile(values, 100) == 100.0
    assert percentile([3.0], 99) == 3.0 and percentile([], 50) == 0.0
    lines = [("user", str(i)) for i in range(10)]
    assert [len(b) for b in batches_of(lines, 4)] == [4, 4, 2]
    assert [line for b in batches_of(lines, 4) for line in b] == lines


def test_quick_run_reports_every_turn_stored_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--calls", "5", "--turns", "10", "--batch", "4", "--seed", "3", "--solo", "2"]) == 0
    out = capsys.readouterr().out
    # 5 calls at once after 2 alone, each 11 turns (the greeting and 10 scripted)
    assert "turns lost: 0   duplicated: 0   calls out of order: 0   (expected 77, stored 77)" in out
    assert "failed calls: 0" in out
    for op, n, requests in (("start", 5, "1.00"), ("checkpoint", 10, "1.00"), ("finalize", 5, "2.00")):
        assert re.search(rf"^{op} +{n}( +[\d.]+){{6}} +{requests} +[\d.]+$", out, re.MULTILINE), out
    assert "WARNING" not in out
    assert re.search(r"^CPU per call: [\d.]+ ms", out, re.MULTILINE)
    assert "Agora requests seen by the emulator: history 21, join 7, leave 7; non-2xx 0" in out
    # the database inside each operation: round trips are counted on both backends, never zero
    for op, n in (("start", 5), ("checkpoint", 10), ("finalize", 5)):
        rows = re.findall(rf"^{op} +{n}( +[\d.]+){{4}} +([\d.]+)$", out, re.MULTILINE)
        assert len(rows) == 2 and all(float(trips) >= 1 for _, trips in rows), out
    assert len(re.findall(r"^one call at a time \(2 calls before the burst\)", out, re.MULTILINE)) == 2
    assert re.search(r"^  CPU floor of the burst's start p99 on one event loop: 0.99 x 5 x [\d.]+ ms", out, re.M)


def test_a_lost_turn_fails_the_run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Sabotage: every snapshot drops its newest message, so each call's final turn never reaches the store."""
    original = MemoryService.record_snapshot

    async def drop_newest(self: MemoryService, call: object, window: Sequence[tuple[str, str]], **kw: object):
        return await original(self, call, list(window)[:-1], **kw)

    monkeypatch.setattr(MemoryService, "record_snapshot", drop_newest)
    assert main(["--calls", "2", "--turns", "4", "--batch", "2", "--seed", "5", "--solo", "0"]) == 1
    out = capsys.readouterr().out
    assert "turns lost: 2   duplicated: 0   calls out of order: 2   (expected 10, stored 8)" in out
    assert "failed calls: 0" in out
