"""The running agents of calls: stopping them (retried until Agora does), their tokens (renewed before they expire),
and whether one has stopped on its own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from bot.agora import AgoraError, AgoraNotFound, ConvoAIClient
from bot.agora.tokens import MAX_TOKEN_LIFETIME_SECONDS, build_rtc_token
from bot.calls.agent import RUNNING_STATUSES, stop_reason, token_update
from bot.calls.model import CallTimings
from bot.config import AgoraSettings
from bot.store.models import CallRecord, EndReason
from bot.store.repository import StorageFull

log = logging.getLogger(__name__)

TOKEN_MARGIN_SECONDS = 600
"""A token outlives the call's time limit by this much."""
TOKEN_RENEW_BEFORE_SECONDS = 3600
"""A checkpoint renews the agent's token once it has less than this left (Agora also warns with NCS 104)."""


def rtc_token(settings: AgoraSettings, channel: str, uid: int, lifetime: int, now: float) -> str:
    return build_rtc_token(
        settings.app_id or "",
        settings.app_certificate.get_secret_value() if settings.app_certificate else "",
        channel,
        uid,
        lifetime,
        now=int(now),
        token_format=settings.token_format,
    )


def token_lifetime(call: CallRecord, now: float) -> int:
    """Seconds a token for the call should last: to the call's time limit plus a margin, at least a minute, at most
    24 h (Agora's cap; longer calls get their tokens renewed)."""
    remaining = call.started_at + call.max_minutes * 60 - now
    return int(max(60, min(remaining + TOKEN_MARGIN_SECONDS, MAX_TOKEN_LIFETIME_SECONDS)))


class AgentStore(Protocol):
    async def get_call(self, call_id: str) -> CallRecord | None: ...
    async def update_call(self, call_id: str, **fields: Any) -> None: ...
    async def calls_with_agent_to_stop(self) -> list[CallRecord]: ...


class AgentControl:
    def __init__(
        self,
        store: AgentStore,
        agora: ConvoAIClient,
        settings: AgoraSettings,
        *,
        clock: Callable[[], float],
        timings: CallTimings,
    ):
        self.store = store
        self.agora = agora
        self.settings = settings
        self.clock = clock
        self.timings = timings
        self._stopping: dict[str, asyncio.Task[None]] = {}
        self._token_expires: dict[str, float] = {}
        self._closed = False

    # ---- stopping --------------------------------------------------------------------------------------

    async def leave_quietly(self, agent_id: str) -> bool:
        """Stop an agent; True once it is stopped (or already gone), False when Agora would not stop it."""
        try:
            await self.agora.leave(agent_id)
        except AgoraNotFound:
            return True
        except AgoraError as exc:
            log.warning("could not stop agent %s: %s", agent_id, exc)
            return False
        return True

    def keep_stopping(self, call_id: str, agent_id: str) -> None:
        """Retry the leave of an ended call's agent in the background until Agora stops it (the flag in the
        store makes the next process carry on after a restart)."""
        if self._closed or call_id in self._stopping:
            return

        async def retry() -> None:
            delay = self.timings.leave_retry_first_seconds
            while True:
                await asyncio.sleep(delay)
                if await self.leave_quietly(agent_id):
                    with contextlib.suppress(StorageFull):  # stored with the ending once there is space
                        await self.store.update_call(call_id, agent_stop_pending=False)
                    log.info("call %s: its agent is stopped at last", call_id)
                    return
                delay = min(delay * 2, self.timings.leave_retry_max_seconds)

        task = asyncio.get_running_loop().create_task(retry(), name=f"stop-agent-{call_id}")
        self._stopping[call_id] = task
        task.add_done_callback(lambda _t: self._stopping.pop(call_id, None))

    async def stop_left_running(self) -> None:
        """After a (re)start: stop the agents of ended calls that were still running at the last shutdown."""
        for ended in await self.store.calls_with_agent_to_stop():
            if ended.agent_id is None or await self.leave_quietly(ended.agent_id):
                await self.store.update_call(ended.call_id, agent_stop_pending=False)
                log.info("call %s: its agent, still running at the last shutdown, is stopped", ended.call_id)
            else:
                self.keep_stopping(ended.call_id, ended.agent_id)

    async def still_running(self) -> int:
        """Ended calls whose agent Agora has not stopped yet (reported in /healthz)."""
        return len(await self.store.calls_with_agent_to_stop())

    async def stopped_reason(self, agent_id: str) -> EndReason | None:
        """After ``/history`` said 404: the end reason if the agent has really stopped, None while it is still
        starting (history is only served once it runs) or cannot be asked right now."""
        try:
            info = await self.agora.query(agent_id)
        except AgoraNotFound:
            return "agent_stopped"
        except AgoraError as exc:
            log.warning("could not ask Agora whether agent %s still runs: %s", agent_id, exc)
            return None
        if info.status in RUNNING_STATUSES:
            return None
        return stop_reason(info.message)

    async def close(self) -> None:
        """At shutdown: stop retrying (the flag in the store hands the retries to the next process)."""
        self._closed = True
        tasks = list(self._stopping.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- the agent's token -----------------------------------------------------------------------------

    def agent_token(self, call: CallRecord) -> str:
        """A fresh token for the call's agent, whose expiry is remembered for `needs_renewal`."""
        now = self.clock()
        lifetime = token_lifetime(call, now)
        token = rtc_token(self.settings, call.channel, call.agent_uid, lifetime, now)
        self._token_expires[call.call_id] = int(now) + lifetime
        return token

    def _token_expiry(self, call: CallRecord) -> float:
        """When the agent's current token expires; after a restart, the first token's expiry (a conservative
        guess: renewing early is harmless)."""
        known = self._token_expires.get(call.call_id)
        if known is not None:
            return known
        first = min(call.max_minutes * 60 + TOKEN_MARGIN_SECONDS, MAX_TOKEN_LIFETIME_SECONDS)
        return call.started_at + first

    def needs_renewal(self, call: CallRecord) -> bool:
        """The call will outlive the agent's token, which expires within the hour."""
        expiry = self._token_expiry(call)
        call_end = call.started_at + call.max_minutes * 60
        return expiry < call_end and self.clock() >= expiry - TOKEN_RENEW_BEFORE_SECONDS

    async def renew_token(self, call_id: str) -> bool:
        """Give the call's running agent a fresh token through ``/update``; False when there is nothing to renew
        or Agora refused (the next checkpoint or 104 notice tries again)."""
        call = await self.store.get_call(call_id)
        if call is None or call.state != "active" or call.agent_id is None:
            return False
        try:
            await self.agora.update(call.agent_id, token_update(self.agent_token(call)))
        except AgoraError as exc:
            self._token_expires.pop(call_id, None)
            log.warning("call %s: could not renew the agent's token: %s", call_id, exc)
            return False
        log.info("call %s: renewed the agent's token", call_id)
        return True

    def forget(self, call_id: str) -> None:
        """The call ended: its agent's token needs no renewal any more."""
        self._token_expires.pop(call_id, None)
