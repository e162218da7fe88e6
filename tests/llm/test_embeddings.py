"""The embeddings client against the fake server, and the fake's /v1/embeddings contract (OpenAI's)."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from bot.llm.embeddings import EmbeddingClient
from bot.llm.errors import LLMBadResponse, LLMError, LLMUnavailable
from standins.llm_server import EMBEDDING_DIMENSIONS, FakeLLM, running_fake_llm


async def _post(llm: FakeLLM, body: Any, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(f"{llm.base_url}/embeddings", json=body, headers=headers)


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"input": ["hi"]}, 400, "model"),
        ({"model": "", "input": ["hi"]}, 400, "model"),
        ({"model": "fake-embed"}, 400, "input"),
        ({"model": "fake-embed", "input": []}, 400, "input"),
        ({"model": "fake-embed", "input": ["ok", 3]}, 400, "input"),
        ({"model": "fake-embed", "input": {"text": "hi"}}, 400, "input"),
        ({"model": "fake-embed", "input": ["ok", ""]}, 400, "input"),
        ({"model": "fake-embed", "input": ["x"] * 2049}, 400, "input"),
        ({"model": "fake-embed", "input": ["hi"], "temperature": 0}, 400, "temperature"),
        ({"model": "no-such-model", "input": ["hi"]}, 404, None),
    ],
)
async def test_the_fake_refuses_what_openai_refuses(fake_llm: FakeLLM, body: dict, status: int, param: str) -> None:
    response = await _post(fake_llm, body)
    assert response.status_code == status
    assert response.json()["error"]["param"] == param


async def test_the_fake_wants_the_api_key() -> None:
    async with running_fake_llm(api_key="sk-right") as llm:
        assert (await _post(llm, {"model": "fake-embed", "input": "hi"})).status_code == 401
        ok = await _post(llm, {"model": "fake-embed", "input": "hi"}, Authorization="Bearer sk-right")
        assert ok.status_code == 200


async def test_the_fake_answers_deterministic_vectors_and_knows_synonyms(fake_llm: FakeLLM) -> None:
    response = await _post(fake_llm, {"model": "fake-embed", "input": "one text"})
    body = response.json()
    assert body["object"] == "list" and body["model"] == "fake-embed"
    assert [d["index"] for d in body["data"]] == [0]
    assert len(body["data"][0]["embedding"]) == EMBEDDING_DIMENSIONS
    assert body["data"][0]["embedding"] == fake_llm.embedding_of("one text")

    def cosine(a: str, b: str) -> float:
        return float(np.dot(fake_llm.embedding_of(a), fake_llm.embedding_of(b)))

    assert cosine("automobile", "car") < 0.5
    fake_llm.concepts.update({"automobile": "vehicle", "car": "vehicle"})
    assert cosine("automobile", "car") == pytest.approx(1.0)


async def test_the_client_sends_one_request_per_batch_and_keeps_the_order(fake_llm: FakeLLM) -> None:
    async with EmbeddingClient(base_url=fake_llm.base_url, model="fake-embed") as client:
        texts = ["first line", "second line", "a third, longer line"]
        matrix = await client.embed(texts)
    assert fake_llm.embedding_requests == [{"model": "fake-embed", "input": texts}]
    assert matrix.dtype == np.float32 and matrix.shape == (3, EMBEDDING_DIMENSIONS)
    for row, text in zip(matrix, texts, strict=True):
        assert row.tolist() == pytest.approx(fake_llm.embedding_of(text))


async def test_the_client_names_the_setting_and_classifies_failures(fake_llm: FakeLLM) -> None:
    async with EmbeddingClient(base_url=fake_llm.base_url, model="missing-model") as client:
        with pytest.raises(LLMError) as refused:
            await client.embed(["hi"])
    assert refused.value.status == 404 and "llm.embedding_model" in refused.value.message
    assert not isinstance(refused.value, LLMUnavailable)

    fake_llm.fail_next(1, 503)
    async with EmbeddingClient(base_url=fake_llm.base_url, model="fake-embed") as client:
        with pytest.raises(LLMUnavailable):
            await client.embed(["hi"])
        fake_llm.embedding_latency = 2.0
        with pytest.raises(LLMUnavailable, match=r"did not answer within 0\.05 s"):
            await client.embed(["hi"], wait_seconds=0.05)


@pytest.mark.parametrize(
    "data",
    [
        [],
        [{"index": 0, "embedding": [0.1]}, {"index": 0, "embedding": [0.2]}],
        [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": [0.2, 0.3]}],
        [{"index": 0, "embedding": "0.1"}, {"index": 1, "embedding": [0.2]}],
        [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": ["x"]}],
    ],
)
async def test_an_answer_that_is_not_one_embedding_per_input_is_refused(data: list) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"data": data}))
    async with EmbeddingClient(base_url="http://embeddings.test/v1", model="m", transport=transport) as client:
        with pytest.raises(LLMBadResponse):
            await client.embed(["a", "b"])
