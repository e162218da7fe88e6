"""Agora requests spread over several small httpx connection pools.

httpcore's pool re-examines its connections every time a request starts or ends, and the check it makes for
each idle connection counts all of them again (quadratic in the pool's size). It also closes an idle connection
as soon as more than ``max_keepalive_connections`` are open. So under a burst of calls one pool either costs
milliseconds of CPU per request (a large pool: 200 connections cost about 30 ms per call in ``bench/calls.py``)
or opens a new connection, with a TLS handshake against the real Agora, for most requests (httpx's default of 20
kept alive). Several small pools, each request going to the one with the fewest requests in flight, keep both
costs small and the total number of connections the same.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx

POOLS = 16
CONNECTIONS_PER_POOL = 8


@dataclass(eq=False)
class _Pool:
    transport: httpx.AsyncBaseTransport
    in_flight: int = field(default=0)


class PooledTransport(httpx.AsyncBaseTransport):
    """An httpx transport made of ``pools`` httpcore pools of ``connections`` connections each, all kept alive."""

    def __init__(self, *, pools: int = POOLS, connections: int = CONNECTIONS_PER_POOL) -> None:
        if pools < 1 or connections < 1:
            raise ValueError("need at least one pool of at least one connection")
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        tls = httpx.create_ssl_context()  # loading the CA bundle takes ~25 ms: once, not once per pool
        self._pools = [_Pool(httpx.AsyncHTTPTransport(verify=tls, limits=limits)) for _ in range(pools)]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        pool = min(self._pools, key=_load)
        pool.in_flight += 1
        try:
            response = await pool.transport.handle_async_request(request)
        except BaseException:
            pool.in_flight -= 1
            raise
        response.stream = _Counted(response.stream, pool)
        return response

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.transport.aclose()


def _load(pool: _Pool) -> int:
    return pool.in_flight


class _Counted(httpx.AsyncByteStream):
    """A response body that gives its pool's slot back once it is closed (httpx closes every response)."""

    def __init__(self, stream: httpx.SyncByteStream | httpx.AsyncByteStream, pool: _Pool) -> None:
        if not isinstance(stream, httpx.AsyncByteStream):
            raise TypeError("an async transport returned a sync response body")
        self._stream = stream
        self._pool: _Pool | None = pool

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if self._pool is not None:
                self._pool.in_flight -= 1
                self._pool = None
