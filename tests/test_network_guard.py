"""The suite cannot reach the internet: any connection outside loopback fails loudly (pytest-socket)."""

from __future__ import annotations

import socket

import httpx
import pytest
from pytest_socket import SocketBlockedError, SocketConnectBlockedError

pytestmark = pytest.mark.filterwarnings("ignore:A test tried to use socket:UserWarning")  # the point of the test


def test_a_connection_to_a_public_address_is_refused() -> None:
    with pytest.raises((SocketBlockedError, SocketConnectBlockedError)):
        socket.create_connection(("93.184.216.34", 443), timeout=1)


async def test_an_http_client_cannot_reach_a_public_host() -> None:
    blocked = False
    async with httpx.AsyncClient() as http:
        try:
            await http.get("https://93.184.216.34/", timeout=1)
        except* SocketConnectBlockedError:  # anyio reports it inside an exception group
            blocked = True
    assert blocked
