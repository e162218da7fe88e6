"""The demo member's side of Discord, in a terminal: commands become the interactions Discord would send, and
every message the member can see is printed as plain text, its buttons and menu entries numbered to be pressed.

What is shown is read from the fake Discord (``FakeDiscord.messages``): what the bot really sent, after the fake
checked it against Discord's API description. A message is printed again whenever the bot edits it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from standins.discord_gateway import EPHEMERAL, LOADING, FakeDiscord

DEMO_MEMBER = 424200000000000001
DEMO_MEMBER_NAME = "demo-member"
MANAGE_SERVER = "32"
OPTION_STRING, OPTION_INTEGER, OPTION_BOOLEAN, OPTION_NUMBER = 3, 4, 5, 10
TIMESTAMP = re.compile(r"<t:(-?\d+)(?::([tTdDfFR]))?>")
ITALICS = re.compile(r"(?<![*\w])\*(\S[^*\n]*?)\*(?![*\w])")
TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
FALSE_WORDS = frozenset({"false", "no", "off", "0"})

HELP = """\
Commands (what you would type in Discord, without the slash):
  call [private]                 start a voice call; open the link it prints in your browser
  hangup                         end your call
  memory                         what the agent remembers about you (its Export button saves the JSON file here)
  remember <text>                have the agent remember something, in your own words
  forget item [<words>] | call | everything
  chat <text>                    text chat with the same memory
  settings show | calls on|off | persona <text> | greeting <text> | max-minutes <n> | daily-calls <n> | retention <days>
  <number>                       press that button or pick that menu entry
  help, quit
Options go first, as name=value (a value with spaces in quotes): chat public=yes Hello, call language=es.
A yes/no option alone turns it on: call private. The text after them is sent exactly as you typed it."""


class CommandError(Exception):
    """What the member typed is not a command the bot offers; the message says why."""


@dataclass(frozen=True)
class Choice:
    """A button or a menu entry of a message."""

    message_id: str
    custom_id: str
    values: tuple[str, ...] | None


@dataclass(frozen=True)
class Command:
    """A slash command as Discord sends it; ``search`` names an autocomplete option still to be picked, with what
    was typed into it so far."""

    name: str
    subcommand: str | None
    options: dict[str, object]
    permissions: str
    search: tuple[str, str] | None = None


def _walk(components: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for component in components:
        yield component
        yield from _walk(component.get("components") or [])


@dataclass(frozen=True)
class Field:
    custom_id: str
    label: str
    value: str
    required: bool


@dataclass
class Form:
    """A modal the bot opened for the member: its fields are asked one after the other."""

    custom_id: str
    fields: list[Field]
    answers: dict[str, str]

    @property
    def asking(self) -> Field:
        return self.fields[len(self.answers)]

    def question(self) -> str:
        field = self.asking
        keep = f" (Enter keeps “{field.value}”)" if field.value else ""
        return f"{field.label}{keep}, or cancel:"


def form_fields(components: Iterable[Mapping[str, Any]]) -> list[Field]:
    """The text inputs of a modal, in rows (``type 1``) or labels (``type 18``)."""
    fields = []
    for component in components:
        inputs = [(c, c.get("label")) for c in component.get("components") or [] if c.get("type") == 4]
        if component.get("type") == 18 and (component.get("component") or {}).get("type") == 4:
            inputs.append((component["component"], component.get("label")))
        for text_input, label in inputs:
            value = str(text_input.get("value") or "")
            required = bool(text_input.get("required", True))
            fields.append(Field(text_input["custom_id"], str(label or text_input["custom_id"]), value, required))
    return fields


class Screen:
    """Prints what the member sees; ``refresh()`` prints messages that are new or changed since the last call."""

    def __init__(self, fake: FakeDiscord, write: Callable[[str], None], downloads: Path | None = None) -> None:
        """``downloads``: where files the bot sends the member (an export) are saved, as a browser would."""
        self.fake = fake
        self.write = write
        self.downloads = downloads
        self.shown: dict[str, str] = {}
        self.choices: dict[int, Choice | Command] = {}
        self._next_choice = 1
        self.form: Form | None = None
        self._forms_seen: dict[str, int] = {}

    def visible(self, message: Mapping[str, Any]) -> str | None:
        """Where the member sees ``message`` (a heading), or None when they do not."""
        if message["author"]["id"] != self.fake.bot_user_id or message["flags"] & LOADING:
            return None
        if message["channel_id"] == self.fake.dm_channel_id(DEMO_MEMBER):
            return "direct message"
        if message["channel_id"] != self.fake.channel_id:
            return None
        if message["flags"] & EPHEMERAL:
            owner = self.fake.ephemeral_recipient(message["id"])
            return "only you can see this" if owner == str(DEMO_MEMBER) else None
        return "in #general"

    def refresh(self) -> bool:
        printed = self._new_form()
        for message_id, message in list(self.fake.messages.items()):
            where = self.visible(message)
            if where is None:
                continue
            body = self._body(message)
            if self.shown.get(message_id) == body:
                continue
            heading = f"Bot ({where}{', updated' if message_id in self.shown else ''}):"
            self.shown[message_id] = body
            self.write("\n".join([heading, *self._numbered(message), ""]))
            printed = True
        return printed

    def _new_form(self) -> bool:
        """A modal the bot just opened for the member becomes the form being filled in."""
        for custom_id, modal in self.fake.modals.items():
            if self._forms_seen.get(custom_id) == id(modal):
                continue
            self._forms_seen[custom_id] = id(modal)
            fields = form_fields(modal.get("components") or [])
            if fields:
                self.form = Form(custom_id, fields, {})
                self.write(f"Bot opened a form: {modal.get('title', '')}\n  {self.form.question()}")
                return True
        return False

    def answer(self, line: str) -> dict[str, str] | None:
        """The member's line for the form's current field: the values to submit once every field is answered."""
        form = self.form
        assert form is not None
        field = form.asking
        text = line or field.value
        if not text and field.required:
            self.write(f"  {field.label} is needed; type it, or cancel:")
            return None
        form.answers[field.custom_id] = text
        if len(form.answers) < len(form.fields):
            self.write(f"  {form.question()}")
            return None
        self.form = None
        return form.answers

    @staticmethod
    def _body(message: Mapping[str, Any]) -> str:
        return repr((message.get("content"), message.get("embeds"), message.get("components")))

    def _numbered(self, message: Mapping[str, Any]) -> list[str]:
        self.choices = {n: c for n, c in self.choices.items() if getattr(c, "message_id", None) != message["id"]}
        lines = [f"  {line}" for line in plain(message.get("content") or "").splitlines()]
        for embed in message.get("embeds") or []:
            lines += [f"  | {plain(line)}" for line in embed_text(embed)]
        for attachment in message.get("attachments") or []:
            saved = self._download(message["id"], attachment)
            where = f", saved as {saved}" if saved is not None else ""
            lines.append(f"  [file] {attachment['filename']} ({attachment['size']} bytes){where}")
        for component in _walk(message.get("components") or []):
            lines += [f"  {line}" for line in self._component(message["id"], component)]
        return lines

    def _download(self, message_id: str, attachment: Mapping[str, Any]) -> Path | None:
        """The attachment saved in ``downloads`` (named after it, its id first when that name is taken)."""
        if self.downloads is None:
            return None
        uploaded = next((f for f in self.fake.files.get(message_id, []) if f.attachment_id == attachment["id"]), None)
        if uploaded is None:
            return None
        self.downloads.mkdir(parents=True, exist_ok=True)
        name = Path(str(attachment["filename"])).name or "file"
        path = self.downloads / name
        if path.exists() and path.read_bytes() != uploaded.data:
            path = self.downloads / f"{attachment['id']}-{name}"
        path.write_bytes(uploaded.data)
        return path

    def _component(self, message_id: str, component: Mapping[str, Any]) -> list[str]:
        kind = component.get("type")
        if kind == 2 and component.get("url"):
            return [f"{component.get('label') or 'Link'}: {component['url']}"]
        if kind == 2:
            gone = " (not available)" if component.get("disabled") else ""
            return [self._choice(message_id, component["custom_id"], None, f"{component.get('label', '?')}{gone}")]
        if kind == 3:
            lines = [f"{component.get('placeholder') or 'Choose one'}:"]
            for option in component.get("options") or []:
                label = option["label"] + (f" — {option['description']}" if option.get("description") else "")
                lines.append("  " + self._choice(message_id, component["custom_id"], (option["value"],), label))
            return lines
        if kind == 10:
            return str(component.get("content", "")).splitlines()
        return []

    def _choice(self, message_id: str, custom_id: str, values: tuple[str, ...] | None, label: str) -> str:
        return self.offer(Choice(message_id, custom_id, values), label)

    def offer(self, choice: Choice | Command, label: str) -> str:
        """A numbered line for ``choice``; typing the number picks it."""
        number = self._next_choice
        self._next_choice += 1
        self.choices[number] = choice
        return f"[{number}] {label}"


def _timestamp(found: re.Match[str]) -> str:
    moment = datetime.fromtimestamp(int(found.group(1))).astimezone()
    return moment.strftime("%Y-%m-%d" if found.group(2) in ("d", "D") else "%Y-%m-%d %H:%M")


def plain(text: str) -> str:
    """Discord's markup as a terminal shows it: bold, italics and underline marks dropped (code marks kept), and
    timestamps (``<t:1700000000:d>``, which Discord shows in the reader's time zone) as local dates."""
    text = text.replace("**", "").replace("__", "")
    text = ITALICS.sub(r"\1", text)
    return TIMESTAMP.sub(_timestamp, text)


def embed_text(embed: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    if embed.get("title"):
        lines.append(str(embed["title"]).upper())
    if embed.get("description"):
        lines += str(embed["description"]).splitlines()
    for field in embed.get("fields") or []:
        lines.append(f"{field['name']}:")
        lines += [f"  {line}" for line in str(field["value"]).splitlines()]
    if (embed.get("footer") or {}).get("text"):
        lines.append(f"— {embed['footer']['text']}")
    return lines


def _convert(option: Mapping[str, Any], raw: str) -> object:
    kind = option["type"]
    try:
        if kind == OPTION_INTEGER:
            return int(raw)
        if kind == OPTION_NUMBER:
            return float(raw)
    except ValueError:
        raise CommandError(f"{option['name']} must be a number, not {raw!r}") from None
    if kind == OPTION_BOOLEAN:
        if raw.lower() not in TRUE_WORDS | FALSE_WORDS:
            raise CommandError(f"{option['name']} is on or off, not {raw!r}")
        return raw.lower() in TRUE_WORDS
    return raw


WORD = re.compile(r"\S+")
QUOTED_VALUE = re.compile(r"""(["'])(.*?)\1(?=\s|$)""", re.DOTALL)


def _words(line: str) -> Iterator[tuple[str, int, int]]:
    """The whitespace-separated words of ``line`` with where each starts and ends; an option's value in quotes
    (``persona="A patient tutor"``) is one word, without its quotes."""
    at = 0
    while found := WORD.search(line, at):
        key, sep, rest = found.group(0).partition("=")
        quoted = QUOTED_VALUE.match(line, found.start() + len(key) + 1) if sep and rest[:1] in "\"'" else None
        if quoted is not None:
            yield f"{key}={quoted.group(2)}", found.start(), quoted.end()
            at = quoted.end()
        else:
            yield found.group(0), found.start(), found.end()
            at = found.end()


def parse_command(commands: list[dict[str, Any]], line: str) -> Command:
    """A typed line read against the synced command definitions: ``name [subcommand] [option=value ...] [free
    text]``. Options come first (a value with spaces in quotes); the free text is the rest of the line exactly as
    typed, apostrophes and quotes included, and fills the first text option. A bare boolean option's name sets it
    (``call private``), a single word fills a lone option (``settings calls off``). An option with autocomplete is
    searched, not filled: what was typed for it (maybe nothing) becomes ``search``, as when typing into it in
    Discord."""
    words = list(_words(line))
    if not words:
        raise CommandError("type a command; help lists them")
    name, rest = words[0][0].lstrip("/").lower(), words[1:]
    command = next((c for c in commands if c["name"] == name), None)
    if command is None:
        raise CommandError(f"there is no /{name}; type help")
    options = list(command.get("options") or [])
    subcommand = None
    subs = [o for o in options if o["type"] == 1]
    if subs:
        names = [o["name"] for o in subs]
        if not rest or rest[0][0] not in names:
            raise CommandError(f"/{name} needs one of: {', '.join(names)}")
        subcommand = rest.pop(0)[0]
        options = list(next(o for o in subs if o["name"] == subcommand).get("options") or [])
    by_name = {o["name"]: o for o in options}
    values: dict[str, object] = {}
    free = ""
    for word, begins, _ends in rest:
        key, sep, raw = word.partition("=")
        if sep and key in by_name:
            values[key] = _convert(by_name[key], raw)
        elif word in by_name and by_name[word]["type"] == OPTION_BOOLEAN:
            values[word] = True
        else:
            free = line[begins:].strip()
            break
    if free:
        open_options = [o for o in options if o["name"] not in values]
        text_option = next((o for o in open_options if o["type"] == OPTION_STRING), None)
        target = text_option or (open_options[0] if len(open_options) == 1 else None)
        if target is None:
            raise CommandError(f"/{name} {subcommand or ''} takes no {free!r}".replace("  ", " "))
        values[target["name"]] = _convert(target, free)
    search = next(((o["name"], str(values.pop(o["name"], ""))) for o in options if o.get("autocomplete")), None)
    missing = [o["name"] for o in options if o.get("required") and o["name"] not in values]
    if search is not None and search[0] in missing:
        missing.remove(search[0])
    elif search is not None and not search[1]:
        search = None  # an optional search left empty
    if missing:
        raise CommandError(f"/{name} {subcommand or ''} needs {', '.join(missing)}".replace("  ", " "))
    permissions = MANAGE_SERVER if command.get("default_member_permissions") else "0"
    return Command(name, subcommand, values, permissions, search)
