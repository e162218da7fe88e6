"""The Agora transport: several small pools, connections kept and reused under a burst."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest
from aiohttp import web

from bot.agora.pools import PooledTransport


@dataclass
class SlowServer:
    """Answers every request after a short pause and records which connection (client port) each came on."""

    url: str = ""
    ports: list[int] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0


@pytest.fixture
async def slow_server() -> AsyncIterator[SlowServer]:
    server = SlowServer()

    async def handle(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        server.ports.append(peer[1] if peer else -1)
        server.in_flight += 1
        server.most_in_flight = max(server.most_in_flight, server.in_flight)
        try:
            await asyncio.sleep(0.02)
        finally:
            server.in_flight -= 1
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield server
    finally:
        await runner.cleanup()


async def burst(client: httpx.AsyncClient, n: int) -> None:
    responses = await asyncio.gather(*(client.get(f"/r/{i}") for i in range(n)))
    assert [r.json() for r in responses] == [{"ok": True}] * n


async def test_a_burst_uses_every_pool_and_later_bursts_reuse_the_same_connections(slow_server: SlowServer) -> None:
    transport = PooledTransport(pools=4, connections=5)
    async with httpx.AsyncClient(base_url=slow_server.url, transport=transport) as client:
        await burst(client, 60)
        first = set(slow_server.ports)
        await burst(client, 60)
        await burst(client, 60)

    assert slow_server.most_in_flight == 20  # 4 pools x 5 connections, all busy at once
    assert len(first) == 20
    assert set(slow_server.ports) == first  # nothing closed and reopened between bursts


async def test_one_default_httpx_pool_reconnects_under_the_same_burst(slow_server: SlowServer) -> None:
    """What the transport avoids: httpx's single pool closes idle connections while more than 20 are open."""
    async with httpx.AsyncClient(base_url=slow_server.url) as client:
        await burst(client, 60)
        await burst(client, 60)
    assert len(set(slow_server.ports)) > 20


async def test_requests_go_to_the_least_busy_pool_and_give_their_slot_back(slow_server: SlowServer) -> None:
    transport = PooledTransport(pools=3, connections=2)
    async with httpx.AsyncClient(base_url=slow_server.url, transport=transport) as client:
        await burst(client, 6)
        assert slow_server.most_in_flight == 6
        async with client.stream("GET", "/streamed") as response:
            assert response.status_code == 200
            assert sorted(pool.in_flight for pool in transport._pools) == [0, 0, 1]
        assert [pool.in_flight for pool in transport._pools] == [0, 0, 0]


async def test_a_failed_request_gives_its_slot_back() -> None:
    transport = PooledTransport(pools=2, connections=1)
    async with httpx.AsyncClient(base_url="http://127.0.0.1:9", transport=transport) as client:
        for _ in range(3):
            with pytest.raises(httpx.ConnectError):
                await client.get("/")
    assert [pool.in_flight for pool in transport._pools] == [0, 0]


def test_a_pool_needs_a_connection() -> None:
    with pytest.raises(ValueError, match="at least one"):
        PooledTransport(pools=0)
    with pytest.raises(ValueError, match="at least one"):
        PooledTransport(connections=0)
