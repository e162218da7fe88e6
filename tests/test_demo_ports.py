"""The demo's call page keeps its port from run to run (8080 when free), so its links and an SSH forward stay the
same; --port chooses another, and a taken one is refused with what to do."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from demo import session
from demo.session import BotDidNotStart, call_page_port


@pytest.fixture
def taken() -> Iterator[int]:
    """A port on 127.0.0.1 that something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def free() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_default_port_is_used_when_free_and_another_when_taken(taken: int, monkeypatch: pytest.MonkeyPatch) -> None:
    wanted = free()
    monkeypatch.setattr(session, "DEFAULT_WEB_PORT", wanted)
    assert call_page_port(None) == wanted
    monkeypatch.setattr(session, "DEFAULT_WEB_PORT", taken)
    assert call_page_port(None) not in (taken, 0)


def test_port_is_used_as_given_and_a_taken_one_is_refused(taken: int) -> None:
    wanted = free()
    assert call_page_port(wanted) == wanted
    with pytest.raises(BotDidNotStart, match=f"port {taken} is already in use on 127.0.0.1; choose another with"):
        call_page_port(taken)
