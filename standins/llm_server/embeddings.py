"""``POST /v1/embeddings``: the request checked as OpenAI checks it, answered with deterministic unit vectors (a hashed
bag of words, with ``concepts`` sharing a dimension as synonyms would)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import re
from typing import Any

from aiohttp import web

from standins.llm_server.errors import FakeLLMRequestError, json_body

EMBEDDING_DIMENSIONS = 64
MAX_EMBEDDING_INPUTS = 2048
"""OpenAI's limit on the number of inputs of one embeddings request."""
KNOWN_EMBEDDING_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})


def validate_embeddings(body: dict[str, Any], models: tuple[str, ...]) -> list[str]:
    """The texts of a valid embeddings request; what OpenAI refuses is refused the same way."""
    for name in body:
        if name not in KNOWN_EMBEDDING_FIELDS:
            raise FakeLLMRequestError(400, f"Unrecognized request argument supplied: {name}", param=name)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise FakeLLMRequestError(400, "you must provide a model parameter", param="model")
    if model not in models:
        raise FakeLLMRequestError(
            404, f"The model `{model}` does not exist or you do not have access to it.", code="model_not_found"
        )
    if body.get("encoding_format", "float") != "float":
        raise FakeLLMRequestError(400, "FakeLLM: only encoding_format 'float' is served", param="encoding_format")
    value = body.get("input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise FakeLLMRequestError(400, "'input' must be a string or a non-empty array of strings", param="input")
    if len(texts) > MAX_EMBEDDING_INPUTS:
        raise FakeLLMRequestError(400, f"'input' must have at most {MAX_EMBEDDING_INPUTS} items", param="input")
    if any(not t for t in texts):
        raise FakeLLMRequestError(400, "'input' cannot contain an empty string", param="input")
    return texts


class EmbeddingsRoute:
    """The fake's embeddings endpoint and what it received."""

    def _init_embeddings(self, embedding_models: tuple[str, ...]) -> None:
        self.embedding_models = embedding_models
        self.embedding_requests: list[dict[str, Any]] = []
        """Every embeddings request body that passed the bearer-token check and JSON parsing."""
        self.embedding_latency = 0.0
        """Seconds before an embeddings request is answered (a slow embedding server)."""
        self.concepts: dict[str, str] = {}
        """Word -> concept: words mapped to one concept share a dimension of the deterministic vectors, so texts
        that share no word can be near each other (synonyms), as with a real embedding model."""

    async def _embeddings(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            await self._preamble(request)
            body = json_body(raw)
            self.embedding_requests.append(body)
            if self.embedding_latency > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.embedding_latency)
            self._inject_failure()
            texts = validate_embeddings(body, self.embedding_models)
        except FakeLLMRequestError as exc:
            return exc.response()
        data = [
            {"object": "embedding", "index": i, "embedding": self.embedding_of(text)} for i, text in enumerate(texts)
        ]
        tokens = sum(len(text.split()) for text in texts)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    def embedding_of(self, text: str) -> list[float]:
        """A deterministic unit vector: a hashed bag of words (with ``concepts`` mapped to one dimension)."""
        vector = [0.0] * EMBEDDING_DIMENSIONS
        for word in re.findall(r"\w+", text.lower()):
            if len(word) > 3 and word.endswith("s"):
                word = word[:-1]
            word = self.concepts.get(word, word)
            digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
            vector[int.from_bytes(digest, "big") % EMBEDDING_DIMENSIONS] += 1.0
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm for x in vector]
