"""A quick run of the dense-retrieval cost benchmark: every figure is printed, the member's vectors all stored."""

from __future__ import annotations

import re

import pytest

from bench.dense_retrieval import main


@pytest.mark.parametrize("encryption", ["off", "on"])
def test_quick_run_prints_every_figure(encryption: str, capsys: pytest.CaptureFixture[str]) -> None:
    main(["--dims", "8", "--runs", "3", "--encryption", encryption])
    out = capsys.readouterr().out
    assert "member 1: 5476 vectors of 8 dimensions" in out, out  # 5,000 lines and 500 facts, 3 x 8 kept for later
    for name in (
        "embedding the utterance",
        "fuse, matrix kept",
        "fuse, 8 vectors added since",
        "fuse, matrix read again",
        "put_vectors, one batch of 64",
        "query-aware build, BM25 only",
        "query-aware build, dense",
    ):
        assert re.search(rf"^{re.escape(name)}.* p50 +[\d.]+ ms +p99 +[\d.]+ ms$", out, re.MULTILINE), name
