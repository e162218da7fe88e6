"""A quick run of the live-recall benchmark: every proxied stream completes and its lines are stored."""

from __future__ import annotations

import re

import pytest

from bench.live_recall import main


def test_quick_run_prints_both_paths_and_stores_each_turn(capsys: pytest.CaptureFixture[str]) -> None:
    main(
        [
            "--members",
            "2",
            "--levels",
            "1,2",
            "--rounds",
            "2",
            "--builds",
            "5",
            "--reply-chars",
            "40",
            "--relay-only-level",
            "2",
            "--stream-seconds",
            "0.05",
            "--tools-level",
            "2",
        ]
    )
    out = capsys.readouterr().out
    for level, n in ((1, 2), (2, 4)):
        for path in ("direct", "proxy"):
            assert re.search(rf"^ +{level} {path} +{n}( +[\d.]+){{4}}$", out, re.MULTILINE), out
        assert re.search(rf"^ +{level} proxy adds -?[\d.]+ ms to p99 TTFB", out, re.MULTILINE), out
    assert re.search(r"^ +2 of which relaying alone \(memory paused\): -?[\d.]+ ms", out, re.MULTILINE), out
    assert re.search(r"^per-turn memory build \(5,000 turns, 500 facts, 5 runs\): p50 [\d.]+ ms", out, re.MULTILINE)
    assert re.search(
        r"^ +2 memory tools offered: CPU per proxied turn [\d.]+ ms against [\d.]+ ms without \([-+][\d.]+ ms\)",
        out,
        re.MULTILINE,
    ), out
    # member 1 took the warm-up turn and 8 rounds (2 levels, then the level without and with the tools): the
    # greeting (first in the agent's window), then a user line and a reply each
    assert "lines stored by the route in member 1's call: 19" in out, out
