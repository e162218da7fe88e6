"""Every client of the OpenAI-compatible server connects through ``LLMConnection``: the same checks, headers and
masking of the key for chat completions, the voice relay's streams and embeddings."""

from __future__ import annotations

import pytest

from bot.llm import LLMClient
from bot.llm.connection import LLMConnection
from bot.llm.embeddings import EmbeddingClient

SECRET = "sk-connection-secret"


@pytest.mark.parametrize("make", [LLMClient, EmbeddingClient])
def test_each_client_refuses_a_base_url_that_is_not_http(make: type[LLMClient] | type[EmbeddingClient]) -> None:
    with pytest.raises(ValueError, match="must start with http"):
        make(base_url="llm.example/v1", model="m")


async def test_requests_and_streams_carry_the_same_headers_and_the_key_is_masked() -> None:
    connection = LLMConnection(base_url="http://llm.test/v1/", api_key=SECRET, timeout=5.0, user_agent="ua/1")
    try:
        assert connection.base_url == "http://llm.test/v1"
        assert connection.http.headers["Authorization"] == f"Bearer {SECRET}"
        assert connection.http.headers["User-Agent"] == "ua/1"
        assert connection.streams().headers["Authorization"] == f"Bearer {SECRET}"
        assert connection.redact(f"bad key {SECRET}!") == "bad key ***!"
    finally:
        await connection.aclose()
    keyless = LLMConnection(base_url="http://llm.test/v1", api_key="", timeout=5.0, user_agent="ua/1")
    assert "Authorization" not in keyless.http.headers and keyless.redact("text") == "text"
    await keyless.aclose()
