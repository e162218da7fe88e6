"""A local stand-in for an OpenAI-compatible chat-completions server.

It validates requests strictly enough that a test fails when the bot sends something the real API would
reject, and it never makes a reply up: with nothing queued and no responder set it answers 500 "no scripted
reply", so a test cannot pass by accident.

Order of handling for every request: reading the body, ``latency`` wait, bearer-token check (401), JSON
parsing (400), recording in ``requests`` (chat completions only), an injected ``fail_next`` failure,
validation (400), reply.

The package: ``server`` (:class:`FakeLLM`: routes, scripted replies, injected failures), ``chat_validation`` and
``errors`` (what OpenAI refuses, and how), ``streaming`` (streamed replies), ``tool_calls`` (scripted tool calls)
and ``embeddings`` (``/v1/embeddings``).
"""

from standins.llm_server.embeddings import EMBEDDING_DIMENSIONS
from standins.llm_server.errors import FakeLLMRequestError
from standins.llm_server.server import FakeLLM, Responder, main, running_fake_llm

__all__ = ["EMBEDDING_DIMENSIONS", "FakeLLM", "FakeLLMRequestError", "Responder", "main", "running_fake_llm"]
