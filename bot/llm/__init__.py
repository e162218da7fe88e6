"""OpenAI-compatible chat-completions client used by the memory pipeline and the config doctor."""

from bot.llm.client import LLMClient
from bot.llm.errors import LLMBadResponse, LLMError, LLMUnavailable

__all__ = ["LLMBadResponse", "LLMClient", "LLMError", "LLMUnavailable"]
