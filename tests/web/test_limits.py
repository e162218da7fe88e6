"""Every route reads its body through ``read_bounded``: the whole body up to the limit, nothing past it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bot.web.limits import read_bounded

LIMIT = 1000


async def _echo_size(request: web.Request) -> web.Response:
    body = await read_bounded(request, LIMIT)
    return web.json_response({"size": None if body is None else len(body)})


@pytest_asyncio.fixture
async def client() -> AsyncIterator[TestClient]:
    app = web.Application()
    app.router.add_post("/", _echo_size)
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        yield test_client


async def _pieces(size: int, count: int) -> AsyncIterator[bytes]:
    for _ in range(count):
        yield b"z" * size


@pytest.mark.parametrize("size", [0, 1, LIMIT])
async def test_a_body_within_the_limit_is_read_whole(client: TestClient, size: int) -> None:
    assert await (await client.post("/", data=b"x" * size)).json() == {"size": size}
    assert await (await client.post("/", data=_pieces(size // 4 or size, 4 if size >= 4 else 1))).json() == {
        "size": (size // 4) * 4 if size >= 4 else size
    }


async def test_a_body_over_the_limit_is_refused_by_its_length_or_while_it_is_read(client: TestClient) -> None:
    assert await (await client.post("/", data=b"x" * (LIMIT + 1))).json() == {"size": None}
    assert await (await client.post("/", data=_pieces(LIMIT // 3, 4))).json() == {"size": None}  # chunked
