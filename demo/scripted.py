"""The scripted stand-in for an LLM when the demo runs without ``LLM_BASE_URL``: short, clearly canned answers.

It answers the bot's three kinds of request the way their callers expect, without understanding anything:
fact extraction (a JSON reply: every line the member said becomes a fact quoting it verbatim, so the call's card and
``/memory`` have something to show), and voice or text replies: an echo that says it is scripted, then what the
memory message the bot gave it holds (its facts, else what the member said in earlier conversations), so the trial
shows memory being used."""

from __future__ import annotations

import json
import re
from typing import Any

SCRIPTED_MODEL = "scripted-demo"
TRANSCRIPT = re.compile(r"<transcript>\n(.*?)\n</transcript>", re.DOTALL)
EXISTING_FACT = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)
MAX_FACTS = 5
MAX_SAID_BACK = 3
MEMORY = re.compile(r"<memory>\n(.*?)</memory>", re.DOTALL)
FACT_LINE = re.compile(r'^- ("(?:[^"\\]|\\.)*")(?: \(\d{4}-\d\d-\d\d\))?$')
THEIR_LINE = re.compile(r'^- them: ("(?:[^"\\]|\\.)*")')


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def extraction_reply(prompt: str) -> str:
    """The extraction JSON for a transcript: one fact per member line (most recent ones), each quoting that line."""
    found = TRANSCRIPT.search(prompt)
    lines = found.group(1).splitlines() if found else []
    said = [line.split(": ", 1)[1] for line in lines if line.startswith("USER") and ": " in line]
    known = {text: int(fact_id) for fact_id, text in EXISTING_FACT.findall(prompt)}
    facts: list[dict[str, Any]] = []
    for line in said[-MAX_FACTS:]:
        text = f"You said: {line}"
        facts.append({"text": text, "evidence": line, "replaces": [], "duplicate_of": known.get(text)})
    lines_said = f"{len(said)} line{'s' if len(said) != 1 else ''}"
    summary = f"A demo conversation in which the user said {lines_said} (summary by the scripted stand-in)."
    return json.dumps({"summary": summary, "facts": facts})


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def remembered(system: str) -> tuple[list[str], list[str]]:
    """What the memory message (``bot.memory.block``) in ``system`` holds: its facts, and the member's lines of
    earlier conversations, each as the text it quotes."""
    found = MEMORY.search(system)
    facts: list[str] = []
    said: list[str] = []
    for line in found.group(1).splitlines() if found else []:
        if fact := FACT_LINE.match(line):
            facts.append(json.loads(fact.group(1)))
        elif their := THEIR_LINE.match(line):
            said.append(json.loads(their.group(1)))
    return facts, said


def said_back(system: str) -> str:
    """The scripted agent's account of its memory, so the trial shows memory being used."""
    facts, said = remembered(system)
    if facts:
        return "from my memory: " + "; ".join(f"“{_short(fact, 80)}”" for fact in facts[:MAX_SAID_BACK])
    if said:
        return f"you told me before: “{_short(said[-1], 80)}”"
    return "my memory of you is empty so far"


def respond(body: dict[str, Any]) -> str:
    """The reply to one chat-completions request (``FakeLLM.set_responder``)."""
    messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
    if body.get("response_format") is not None or any("<transcript>" in _text(m) for m in messages):
        return extraction_reply("\n".join(_text(m) for m in messages))
    last = next((_text(m) for m in reversed(messages) if m.get("role") == "user"), "")
    system = "\n".join(_text(m) for m in messages if m.get("role") == "system")
    return f"(scripted reply, no real model) I heard: “{_short(last)}” — {said_back(system)}"
