"""Member text as the agent reads it inside the memory block: nothing in it can read as the block's own tags or as a
chat template's special tokens, however it is spelled.

A spelling list always misses one (a Cyrillic е in ``</mеmory>``, an invisible character that is not listed, 200
characters of junk before ``>``, ``&lt;/memory&gt;``, ``<\\/memory>``, ``<|im_end|>``), so the text is read the
way a model would: its *skeleton*, each character folded to what it looks like (NFKD without marks, then Unicode's
confusables of Latin letters and of ``< > [ ] / | _``, then a Latin letter's other forms by name: small capitals,
squared and circled letters, regional indicators), lower-cased, with HTML entities, backslash escapes and percent
escapes decoded. Wherever the skeleton reads as a tag of the block (``<memory``, ``</memory``) or a template token
(``<|``, ``|>``, ``<s>``, ``<start_of_turn>``, ``<<SYS>>``, ``[INST]``, ...), the brackets of that stretch become
round ones in the text itself: ``</mеmory>`` is kept as ``(/mеmory)``. Nothing else changes, so a Russian or
Japanese line reads as it was said.

The text is also cleaned of what no reader sees: every format character (Unicode category Cf: zero-width ones,
bidirectional controls, tag characters) and the other default-ignorable code points (variation selectors, Hangul
fillers, the combining grapheme joiner), then NFKC-normalised. Emoji joined by a zero-width joiner are shown as
their parts.

Most lines hold none of the characters a tag or token needs and cost a search or two of the text (``_NOTICED``,
``_SUSPECT_ASCII``); the others are folded with ``str.translate`` and decoded piece by piece. The rendered result
is cached by the caller (``bot.memory.block.quoted``).
"""

from __future__ import annotations

import html
import re
import unicodedata
from bisect import bisect_right

_INVISIBLE_BMP = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164"
    "\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2"
)
_INVISIBLE_ASTRAL = (
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
"""Format characters (Cf, Unicode 15.1) and the other default-ignorable code points (DerivedCoreProperties); those
above U+FFFF apart, as the quick search (``_NOTICED``) lists only the others."""
_INVISIBLE = re.compile(f"[{_INVISIBLE_BMP}{_INVISIBLE_ASTRAL}]+")

_LOOK_ALIKES = {
    "a": "ɑΑαАаᎪᗅ⍺ꓮ𐊠𖽀",
    "b": "ƄΒВЬᏏᏴᑲᖯᗷꓐꞴ𐊂𐊡𐌁",
    "c": "ϲϹСсᏟᴄⲤⲥꓚꮯ𐊢𐌂𐐕𐐽𐔜𑣩𑣲🝌",
    "d": "ԁᎠᏧᑯᗞᗪꓒꓓ",
    "e": "ΕЕеҽᎬ℮⋿ⴹꓰꬲ𐊆𑢦𑢮",
    "f": "ſϜքᖴẝꓝꞘꞙꬵ𐊇𐊥𐔥𑢢𑣂𝈓",
    "g": "ƍɡԌցᏀᏳᶃꓖ",
    "h": "ΗНһհᎻᏂᕼⲎꓧ𐋏",
    "i": "ıɩɪ˛ͺιіӏᎥ⍳ꙇꭵ𑣃",
    "j": "ͿϳЈјᎫᒍꓙꞲ",
    "k": "ΚКᏦᛕⲔꓗ𐔘",
    "l": "ƖΙІӀ۱ᏞᒪᛁℐℑⅠⲒⳐⵏꓡꓲＩ𐊊𐌉𐌠𐐛𐔦𑢣𑢲𖼖𖼨𝈪𝐈𝐼𝑰𝓘𝕀𝕴𝖨𝗜𝘐𝙄𝙸𝟏𝟙𝟣𝟭𝟷🯱",
    "m": "ΜϺМᎷᗰᛖⲘꓟ𐊰𐌑",
    "n": "ΝոռⲚꓠ𐔓",
    "o": "ΟοσОоՕօ۵०০੦૦ଠ୦௦ం౦ಂ೦ംഠ൦ං๐໐ဝ၀ჿዐᴏᴑⲞⲟⵔ〇ꓳꬽ𐊒𐊫𐐄𐐬𐓂𐓪𐔖𑓐𑢵𑣈𑣗𑣠𝟎𝟘𝟢𝟬𝟶🯰",
    "p": "ΡρРрᏢᑭ⍴Ⲣⲣꓑ𐊕",
    "q": "ԛգզⵕ",
    "r": "ƦгᎡᏒᖇᴦⲅꓣꭇꭈꮁ𐒴𖼵𝈖",
    "s": "ƽЅѕՏᏕᏚꓢꜱꮪ𐊖𐐠𐑈𑣁𖼺",
    "t": "ΤТᎢ⊤⟙Ⲧꓔ𐊗𐊱𐌕𑢼𖼊🝨",
    "u": "ʋυՍսሀᑌᴜ∪⋃ꓴꞟꭎꭒ𐓎𐓶𑢸𑣘𖽂",
    "v": "νѴѵ۷Ꮩᐯᴠ∨⋁ⴸꓦꛟꮩ𐔝𑜆𑢠𑣀𖼈𝈍",
    "w": "ɯѡԜԝաᎳᏔᴡꓪꮃ𑜊𑜎𑜏𑣦𑣯",
    "x": "×ΧХхᕁᕽ᙭᙮ᚷ╳⤫⤬⨯ⲬⵝꓫꞳ𐊐𐊴𐌗𐌢𐔧𑣬",
    "y": "ɣʏΥγУуҮүყᎩᎽᶌỿⲨꓬꭚ𐊲𑢤𑣜𖽃",
    "z": "ΖᏃᴢꓜꮓ𐋵𑢩𑣄𑣥",
    "/": "᜵⁁⁄∕╱⟋⧸Ⳇ〳ノ㇓丿𝈺",
    "<": "˂ᐸᚲ‹❮𝈶〈⟨❬❰⧼⦉⦑⟪",
    ">": "˃ᐳ›❯𖼿𝈷〉⟩❭❱⧽⦊⦒⟫",
    "[": "⁅❲〔〘〚⟦⦋⦍⦏⟬【〖⸢⸤",
    "]": "⁆❳〕〙〛⟧⦌⦎⦐⟭】〗⸣⸥",
    "|": "ǀ∣⏽￨│┃❘⎸⎹︱︳׀",
    "_": "▁‗",
}
"""Characters that look like a Latin letter or a delimiter's punctuation and that NFKD does not fold to it: from
Unicode's confusables.txt (as shipped by confusable_homoglyphs 3.3.1), less what NFKD already folds, plus the
angle and square brackets and vertical lines of other blocks. Letters folding to I are read as l, as
confusables.txt reads them (the names below accept either)."""
_FOLDED = {ord(c): target for target, chars in _LOOK_ALIKES.items() for c in chars}
_FOLDED.update({ord("0"): "o", ord("1"): "l", ord("\\"): "\x01", 0x2800: " "})
_LATIN_NAME = re.compile(r"\b(?:LATIN|INDICATOR SYMBOL) (?:.* )?LETTER (?:SMALL )?(?:CAPITAL )?([A-Z])(?: WITH .*)?$")
_SKIP = "\x01"
"""A character no reader sees (a mark, a control or format character) or reads past (a backslash that escapes
nothing ``_ESCAPED`` decodes): folded to this, which the patterns skip."""
_OPENERS = "<[|"


class _Skeleton(dict[int, str]):
    """``str.translate`` table: each character to the one it looks like (one character, so positions stay)."""

    def __missing__(self, code: int) -> str:
        folded = _fold(chr(code))
        if len(self) < 1 << 15:
            self[code] = folded
        return folded


def _fold(char: str) -> str:
    code = ord(char)
    if code in _FOLDED:
        return _FOLDED[code]
    if char.isascii():
        return _SKIP if code < 32 or code == 127 else char.lower()
    if _INVISIBLE.match(char) or unicodedata.category(char) in ("Mn", "Me", "Cc", "Cf"):
        return _SKIP
    base = [c for c in unicodedata.normalize("NFKD", char) if unicodedata.category(c) not in ("Mn", "Me")]
    if len(base) == 3 and base[0] == "(" and base[2] == ")":  # a parenthesized letter or digit
        base = base[1:2]
    if len(base) != 1:
        return char.lower() if len(char.lower()) == 1 else char
    if base[0] != char:
        return _fold(base[0])
    named = _LATIN_NAME.search(unicodedata.name(char, ""))
    if named:
        return named.group(1).lower()
    lower = char.lower()
    return lower if len(lower) == 1 else char


_SKELETON = _Skeleton()
_GAP = "[\\s\x01]*"


def _word(name: str) -> str:
    """A regular expression for ``name`` in a skeleton: spaces and invisible characters between its letters, i and l
    alike (an I read as l), m also as rn, and ``_`` as any run of gaps, underscores and dashes."""
    letters = {"i": "[il|]", "l": "[il|]", "m": "(?:m|rn)", "_": "[\\s\x01_-]*"}
    return _GAP.join(letters.get(c, re.escape(c)) for c in name)


_TAG_NAMES = (
    "s",
    "bos",
    "eos",
    "unk",
    "pad",
    "sys",
    "system",
    "user",
    "assistant",
    "human",
    "tool",
    "im_start",
    "im_end",
    "im_sep",
    "endoftext",
    "end_of_text",
    "begin_of_text",
    "start_header_id",
    "end_header_id",
    "eot_id",
    "eom_id",
    "start_of_turn",
    "end_of_turn",
    "begin_of_sentence",
    "end_of_sentence",
)
_BRACKET_NAMES = ("inst", "sys", "system_prompt", "available_tools", "tool_calls", "tool_results", "tool_content")


def _any(names: tuple[str, ...]) -> str:
    return "(?:" + "|".join(_word(n) for n in sorted(names, key=len, reverse=True)) + ")"


DANGER = re.compile(
    "|".join(
        [
            f"<{_GAP}/?{_GAP}{_word('memory')}[^<>]*>?",
            f"<{_GAP}\\|",
            f"\\|{_GAP}>",
            f"<{_GAP}<?{_GAP}[|l]?{_GAP}/?{_GAP}{_any(_TAG_NAMES)}{_GAP}[|l]?{_GAP}/?{_GAP}>>?",
            f"\\[{_GAP}/?{_GAP}{_any(_BRACKET_NAMES)}{_GAP}\\]",
        ]
    )
)
"""What a skeleton must not contain: a tag of the memory block (open or close, with anything after it), either half
of a ``<|...|>`` token, a named template token in angle brackets, or one in square brackets."""
_ROUND = str.maketrans({"<": "(", ">": ")", "[": "(", "]": ")"})
_ESCAPED = re.compile(
    r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});?"
    r"|\\+(?:u\{[0-9a-fA-F]{1,6}\}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|x[0-9a-fA-F]{2}|[0-7]{1,3}|[^&%])"
    r"|%[0-9a-fA-F]{2}",
    re.DOTALL,
)
_NFKC_OPENERS = (
    "\u2329\ufe17\ufe39\ufe3b\ufe3f\ufe47\ufe5d\ufe60\ufe64\ufe68\ufe6a\uff05\uff06\uff1c\uff3b\uff3c"
    "\uff5c\U000107b6\U0001f12a\U0001f240\U0001f241\U0001f242\U0001f243\U0001f244\U0001f245\U0001f246\U0001f247\U0001f248"
)
"""The characters NFKC turns into text holding one of ``_SUSPECT``'s."""
_SUSPECT_ASCII = (
    re.compile(r"[<\[\\|&%]"),
    re.compile(
        r"<[\s\x00-\x1f\x7f]*[/|<a-z01]|\[[\s\x00-\x1f\x7f]*/?[\s\x00-\x1f\x7f]*[iltsa1]|\|[\s\x00-\x1f\x7f]*>"
        r"|\\|&[#a-z]|%[0-9a-f]{2}",
        re.IGNORECASE,
    ),
)
"""In a text of ASCII only, a start of a dangerous skeleton or of an escape: a quick search for its characters,
then the search itself (``<3``, ``[note]``, a bare ``|``, ``&`` or ``%`` are ordinary): ``<`` before a letter,
``/``, ``|`` or ``<``; ``[`` before a letter that starts a bracketed token's name."""
_SUSPECT_CHARS = sorted(set("<[|&\\%\u226e\u2224").union(*(_LOOK_ALIKES[target] for target in _OPENERS)))
_SUSPECT = re.compile("[" + "".join(map(re.escape, _SUSPECT_CHARS)) + "]")
"""A character a dangerous skeleton starts with (or one that folds to it, or starts an escape): a text without any
is left as it is."""
_NOTICED = re.compile(
    f"[{_INVISIBLE_BMP}"
    + "".join(re.escape(c) for c in (*_SUSPECT_CHARS, *_NFKC_OPENERS) if c <= "\uffff")
    + "\U00010000-\U0010ffff]"
)
"""What makes a text more than NFKC's business: an invisible character, or one that is or becomes suspect, or any
character above U+FFFF (a class that lists some of those is searched several times slower)."""


def skeleton(text: str) -> str:
    """What ``text`` reads as, one character for each of its own (see the module's docstring); escapes are not
    decoded here."""
    return text.translate(_SKELETON)


def _decoded(escape: str) -> str:
    if escape.startswith("&"):
        return html.unescape(escape)
    if escape.startswith("%"):
        return chr(int(escape[1:], 16))
    body = escape.lstrip("\\")
    if body[:1] in ("u", "U", "x") and len(body) > 1:
        code = int(body[1:].strip("{}"), 16)
        return chr(code) if code < 0x110000 else escape
    if body[:1] in "01234567" and body:
        return chr(int(body, 8))
    return " " if body in ("n", "r", "t", "f", "v") else body


class _Pieces:
    """``text`` cut into plain runs and escapes, each with its skeleton (an escape's of what it decodes to), where
    that starts in the skeleton of the whole, and its span in ``text``."""

    def __init__(self, text: str) -> None:
        self.skeletons: list[str] = []
        self.starts: list[int] = []
        self.spans: list[tuple[int, int]] = []
        self.plain: list[bool] = []
        self._length = 0
        at = 0
        escaped = "&" in text or "\\" in text or "%" in text
        for found in _ESCAPED.finditer(text) if escaped else ():
            self._add(at, found.start(), skeleton(text[at : found.start()]), plain=True)
            self._add(found.start(), found.end(), skeleton(_decoded(found.group())), plain=False)
            at = found.end()
        self._add(at, len(text), skeleton(text[at:]), plain=True)

    def _add(self, begin: int, end: int, folded: str, *, plain: bool) -> None:
        if begin < end:
            self.starts.append(self._length)
            self._length += len(folded)
            self.skeletons.append(folded)
            self.spans.append((begin, end))
            self.plain.append(plain)


def _neutralised(text: str) -> str:
    """``text`` with the brackets of every dangerous stretch made round, until none is left: matches do not overlap,
    so one that shares a character with another (``<|>``: ``<|`` and ``|>``) is found on the next pass."""
    while True:
        rounded = _rounded(text)
        if rounded == text:
            return text
        text = rounded


def _rounded(text: str) -> str:
    pieces = _Pieces(text)
    replaced: dict[int, str] = {}
    for match in DANGER.finditer("".join(pieces.skeletons)):
        for offset, char in enumerate(match.group()):
            if char not in "<>[]":
                continue
            at = match.start() + offset
            piece = bisect_right(pieces.starts, at) - 1
            begin, end = pieces.spans[piece]
            if pieces.plain[piece]:  # one character of skeleton per character
                replaced[begin + at - pieces.starts[piece]] = char.translate(_ROUND)
            else:
                replaced[begin] = pieces.skeletons[piece].translate(_ROUND)
                replaced.update(dict.fromkeys(range(begin + 1, end), ""))
    if not replaced:
        return text
    return "".join(replaced.get(position, char) for position, char in enumerate(text))


def defuse(text: str) -> str:
    """``text`` cleaned of invisible characters, NFKC-normalised, and with the brackets of anything that reads
    as a tag of the memory block or a chat-template token made round."""
    if text.isascii():
        suspect = _SUSPECT_ASCII[0].search(text) and _SUSPECT_ASCII[1].search(text)
        return _neutralised(text) if suspect else text
    if _NOTICED.search(text) is None:
        return unicodedata.normalize("NFKC", text)
    text = unicodedata.normalize("NFKC", _INVISIBLE.sub("", text))
    return text if _SUSPECT.search(text) is None else _neutralised(text)


__all__ = ["DANGER", "defuse", "skeleton"]
