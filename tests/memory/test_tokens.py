"""Token counts are the model's own (o200k_base, shipped with the package) and add up line by line."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.memory.tokens import MESSAGE_OVERHEAD_TOKENS, count_tokens, message_tokens


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
@given(st.lists(lines, min_size=1, max_size=8), st.sampled_from(["Call on 2024-05-01:", "What they told you:"]))
def test_rendered_lines_add_up_exactly(body: list[str], header: str) -> None:
    pieces = [header + "\n", *(line + "\n" for line in body), "</memory>"]
    assert count_tokens("".join(pieces)) == sum(count_tokens(p) for p in pieces)
