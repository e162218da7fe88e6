"""The call page explains an ended call by its end reason: only by reasons the bot records (one vocabulary,
`bot.store.models.EndReason`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import bot.web
from bot.store.models import EndReason

CALL_JS = Path(bot.web.__file__).parent / "static" / "call.js"


def test_the_page_explains_only_end_reasons_the_bot_records() -> None:
    table = CALL_JS.read_text(encoding="utf-8").split("const END_REASONS = {", 1)[1].split("};", 1)[0]
    explained = set(re.findall(r"^\s*(\w+):", table, re.MULTILINE))
    assert "idle_timeout" in explained
    assert explained <= set(get_args(EndReason)), explained - set(get_args(EndReason))
