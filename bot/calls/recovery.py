"""What a restart can still learn about a call whose agent stopped while no bot process watched it.

Once an agent stops, Agora serves its history no more (``/history`` is 404); the only copy is its history webhook
(NCS 103), which Agora resends a few times within minutes. When every delivery fell inside an outage, what the
member said after the call's last checkpoint is gone. Agora's turn analytics (``/turns``, kept for 7 days) carry
timing and type but no text: they still say how many times the member spoke, so the bot can tell the member and
the operator how many things were lost instead of silently keeping part of the call.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from bot.agora import AgoraError, ConvoAIClient
from bot.store.models import CallRecord, TurnRecord

log = logging.getLogger(__name__)


class RecoveryStore(Protocol):
    async def call_turns(self, call_id: str) -> list[TurnRecord]: ...
    async def update_call(self, call_id: str, **fields: Any) -> None: ...


async def count_lost_lines(agora: ConvoAIClient, store: RecoveryStore, call: CallRecord) -> int:
    """How many things the member said that the call's stored lines lack: the member's spoken turns Agora counted
    minus the member's lines stored. Kept on the call (``lines_lost``) and logged for the operator; counted again
    when a late history webhook filled the gap. 0 when nothing is missing or nobody can say: a failure here is
    logged and never holds up the call's ending."""
    if call.agent_id is None or call.private:
        return 0
    try:
        counts = await agora.turns(call.agent_id)
    except AgoraError as exc:
        log.warning(
            "call %s: could not count what was said while no bot process ran (Agora ConvoAI turns): %s",
            call.call_id,
            exc,
        )
        return call.lines_lost
    try:
        stored = sum(1 for line in await store.call_turns(call.call_id) if line.role == "user")
        lost = max(counts.voice_inputs - stored, 0)
        if lost != call.lines_lost:
            await store.update_call(call.call_id, lines_lost=lost)
    except Exception:
        log.exception("call %s: the count of lines lost while no bot process ran could not be stored", call.call_id)
        return call.lines_lost
    if lost:
        log.warning(
            "call %s: %d things the member said were never stored: its agent stopped while no bot process ran and "
            "Agora ConvoAI's history webhook (NCS 103) never arrived (Agora counted %d spoken turns, %d are stored)",
            call.call_id,
            lost,
            counts.voice_inputs,
            stored,
        )
    elif call.lines_lost:
        log.info("call %s: Agora's late history webhook brought back the %d lost lines", call.call_id, call.lines_lost)
    return lost
