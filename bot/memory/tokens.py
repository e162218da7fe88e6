"""Token counting for the context budget.

A documented conservative estimate instead of a model tokenizer: one token per three UTF-8 bytes, rounded up,
plus four tokens of framing per message. BPE tokenizers of current chat models average about four characters
of English per token and at most one token per three bytes for digits and non-Latin scripts, so the estimate
errs on the side of a smaller context. (A real tokenizer such as tiktoken downloads its vocabulary at run time,
which production hosts may not allow.)
"""

from __future__ import annotations

MESSAGE_OVERHEAD_TOKENS = 4


def estimate_tokens(text: str) -> int:
    return -(-len(text.encode("utf-8")) // 3)


def estimate_message_tokens(content: str) -> int:
    return estimate_tokens(content) + MESSAGE_OVERHEAD_TOKENS
