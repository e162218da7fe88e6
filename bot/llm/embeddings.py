"""Async client for an OpenAI-compatible embeddings endpoint (``POST {base_url}/embeddings``).

Request ``{"model", "input": [texts]}``; response ``{"data": [{"index", "embedding": [floats]}, ...]}``. The
vectors come back in input order (by ``index``) as one float32 matrix, one row per text. Errors are the chat
client's typed errors (``bot.llm.errors``): ``LLMUnavailable`` for timeouts, connection errors, 429 and 5xx,
``LLMError`` for other refusals, ``LLMBadResponse`` for an answer that is not embeddings of every input. There
is no retry here: the post-call queue retries a batch later, and a query embedding falls back to lexical search.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import httpx
import numpy as np
import numpy.typing as npt

from bot.llm.connection import LLMConnection
from bot.llm.errors import LLMBadResponse, LLMError, LLMUnavailable

EMBEDDINGS_PATH = "/embeddings"
EMBEDDING_MODEL_SETTING = "llm.embedding_model (LLM_EMBEDDING_MODEL)"
USER_AGENT = "memory-call-bot/0.1 (embeddings client)"
MAX_DETAIL_CHARS = 300

Matrix = npt.NDArray[np.float32]


class EmbeddingClient:
    """One connection pool to one embeddings server and model."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not model:
            raise ValueError(f"{EMBEDDING_MODEL_SETTING} must name a model")
        self._connection = LLMConnection(
            base_url=base_url, api_key=api_key, timeout=timeout, user_agent=USER_AGENT, transport=transport
        )
        self._url = self._connection.base_url + EMBEDDINGS_PATH
        self._model = model
        self._timeout = timeout
        self._http = self._connection.http

    @property
    def model(self) -> str:
        return self._model

    def __repr__(self) -> str:
        return f"EmbeddingClient(url={self._url!r}, model={self._model!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._connection.aclose()

    @property
    def weighs_words(self) -> bool:
        """A server's model reads each text in context and weighs its words itself: no ``salience``."""
        return False

    async def embed(
        self, texts: Sequence[str], *, wait_seconds: float | None = None, salience: object | None = None
    ) -> Matrix:
        """One request for all ``texts``: a (len(texts), dimensions) float32 matrix, rows in input order
        (``salience`` is the embedded model's and not sent)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        wait = self._timeout if wait_seconds is None else wait_seconds
        try:
            response = await self._http.post(self._url, json={"model": self._model, "input": list(texts)}, timeout=wait)
        except httpx.TransportError as exc:
            raise LLMUnavailable(
                f"embeddings at {self._url} did not answer within {wait:g} s: {type(exc).__name__}"
            ) from exc
        if response.status_code != 200:
            detail = self._connection.redact(response.text[:MAX_DETAIL_CHARS])
            error = LLMUnavailable if response.status_code == 429 or response.status_code >= 500 else LLMError
            raise error(
                f"embeddings at {self._url} answered {response.status_code} for model {self._model!r} "
                f"({EMBEDDING_MODEL_SETTING}): {detail}",
                status=response.status_code,
            )
        return _matrix(_json(response), len(texts), self._url)


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise LLMBadResponse(f"embeddings at {response.url} answered something that is not JSON") from exc


def _matrix(body: Any, count: int, url: str) -> Matrix:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or len(data) != count:
        raise LLMBadResponse(f"embeddings at {url} did not answer one embedding per input ({count})")
    rows: list[Any] = [None] * count
    for item in data:
        index = item.get("index") if isinstance(item, dict) else None
        vector = item.get("embedding") if isinstance(item, dict) else None
        if not isinstance(index, int) or not 0 <= index < count or rows[index] is not None:
            raise LLMBadResponse(f"embeddings at {url} answered an embedding with a missing or repeated index")
        if not isinstance(vector, list) or not vector:
            raise LLMBadResponse(f"embeddings at {url} answered an embedding that is not a list of numbers")
        rows[index] = vector
    if len({len(row) for row in rows}) != 1:
        raise LLMBadResponse(f"embeddings at {url} answered embeddings of different lengths")
    try:
        matrix = np.asarray(rows, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise LLMBadResponse(f"embeddings at {url} answered an embedding that is not a list of numbers") from exc
    if not np.isfinite(matrix).all():
        raise LLMBadResponse(f"embeddings at {url} answered an embedding with non-finite numbers")
    return matrix
