"""What an operator sees of a running bot: `/healthz` (JSON) and `/metrics` (Prometheus text format).

One `Monitor` per process collects the figures: the Discord gateway (the bot registers a probe), the
database, Agora reachability (checked in the background at most once a minute, never per request), the
post-call queue, active calls, the version, and counters of calls started, calls ended by route, turns stored
and errors by kind. Services count through the small `Counters` object; nothing here imports discord.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from bot import __version__
from bot.store.health import WriteHealth
from bot.store.models import EndReason

log = logging.getLogger(__name__)

AGORA_CHECK_SECONDS = 60.0
FIRST_AGORA_CHECK_WAIT_SECONDS = 2.0


@dataclass
class Counters:
    """Monotonic counts since the process started."""

    calls_started: int = 0
    calls_ended: Counter[str] = field(default_factory=Counter)
    """By route: the end reason (`bot.store.models.EndReason`: hangup, hangup_page, page_closed, max_duration, ...)."""
    turns_stored: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    """By kind: the exception class the error funnel or a background loop caught."""

    def call_ended(self, route: EndReason, turns: int) -> None:
        self.calls_ended[route] += 1
        self.turns_stored += turns

    def error(self, kind: str) -> None:
        self.errors[kind] += 1


@dataclass(frozen=True)
class Gateway:
    connected: bool
    latency_seconds: float | None


class Pingable(Protocol):
    async def ping(self) -> None: ...


class MonitorStore(Pingable, Protocol):
    """What the health report reads of the database."""

    async def count_open_calls(self) -> int: ...
    async def job_queue(self) -> tuple[int, float | None]: ...
    @property
    def write_health(self) -> WriteHealth: ...


class Monitor:
    def __init__(
        self,
        store: MonitorStore,
        *,
        counters: Counters | None = None,
        agora: Pingable | None = None,
        clock: Callable[[], float] = time.time,
        agora_check_seconds: float = AGORA_CHECK_SECONDS,
    ) -> None:
        self.store = store
        self.counters = counters if counters is not None else Counters()
        self.agora = agora
        self.clock = clock
        self.agora_check_seconds = agora_check_seconds
        self.gateway: Callable[[], Gateway] | None = None
        """Set by the Discord client; None in processes without a gateway (then it is not reported)."""
        self.sections: list[Callable[[], Awaitable[dict[str, object]]]] = []
        """More figures from other services (e.g. the calls backend), merged into the report."""
        self._agora: dict[str, object] = {"configured": agora is not None}
        self._agora_checked = float("-inf")
        self._agora_task: asyncio.Task[None] | None = None
        self.write_health: WriteHealth = store.write_health
        """The store's record of failed writes (bot.store.health): counted as errors, and degraded while failing."""

    # ---- Agora, cached -------------------------------------------------------------------------------

    async def _check_agora(self) -> None:
        assert self.agora is not None
        try:
            await self.agora.ping()
        except Exception as exc:
            self._agora = {"configured": True, "reachable": False, "error": type(exc).__name__}
        else:
            self._agora = {"configured": True, "reachable": True}
        self._agora["checked_at"] = self.clock()

    async def agora_status(self) -> dict[str, object]:
        """The last known reachability; starts a new check in the background when the last is stale."""
        if self.agora is None:
            return dict(self._agora)
        now = self.clock()
        if now - self._agora_checked >= self.agora_check_seconds and (
            self._agora_task is None or self._agora_task.done()
        ):
            self._agora_checked = now
            self._agora_task = asyncio.get_running_loop().create_task(self._check_agora(), name="agora-health")
        if "reachable" not in self._agora and self._agora_task is not None:
            with contextlib.suppress(TimeoutError):  # the very first check: wait a little for an answer
                await asyncio.wait_for(asyncio.shield(self._agora_task), FIRST_AGORA_CHECK_WAIT_SECONDS)
        return dict(self._agora)

    async def close(self) -> None:
        if self._agora_task is not None:
            self._agora_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._agora_task

    # ---- the report ----------------------------------------------------------------------------------

    async def report(self) -> dict[str, object]:
        """The /healthz document. `status` is "ok", "degraded" (Discord or Agora not reachable, or the last write
        to the database failed: `problems` says why) or "unavailable" (the database does not answer: the only
        state /healthz answers 503 to)."""
        now = self.clock()
        report: dict[str, Any] = {"version": __version__}
        try:
            await self.store.ping()
            depth, oldest = await self.store.job_queue()
            active = await self.store.count_open_calls()
        except Exception as exc:
            log.warning("health: the database does not answer: %s", type(exc).__name__)
            report.update(status="unavailable", database={"ok": False, "error": type(exc).__name__})
            return report
        report["database"] = {"ok": True}
        problems: list[str] = []
        writes = self.write_health
        report["queue"] = {"depth": depth, "oldest_age_seconds": None if oldest is None else max(0.0, now - oldest)}
        report["calls"] = {"active": active}
        if self.gateway is not None:
            gateway = self.gateway()
            report["discord"] = {"connected": gateway.connected, "latency_seconds": gateway.latency_seconds}
            if not gateway.connected:
                problems.append("discord: the gateway is not connected")
        report["agora"] = await self.agora_status()
        if report["agora"].get("reachable") is False:
            problems.append(f"agora: the last check failed ({report['agora'].get('error')})")
        for section in self.sections:
            try:
                extra = await section()
            except Exception as exc:
                log.warning("health: a section failed: %s", type(exc).__name__)
                extra = {"error": type(exc).__name__}
                problems.append(f"a health figure failed: {type(exc).__name__}")
            for key, value in extra.items():
                if isinstance(value, dict) and isinstance(report.get(key), dict):
                    report[key] = {**report[key], **value}
                else:
                    report.setdefault(key, value)
        database = report["database"]
        # Writable again once a write succeeds and nothing waits for room (a full disk still takes small writes
        # in place between the failing ones); the episode stays a problem for the window (bot.store.health).
        database["writable"] = writes.writable and not database.get("ended_calls_unsaved")
        failing = writes.failing
        if failing is not None:
            ago = max(0.0, writes.clock() - (writes.last_failed_at or 0.0))
            since = " (writes succeed again since)" if database["writable"] else ""
            problems.insert(0, f"database: a write failed {ago:.0f} s ago{since}: {failing}")
        report["counters"] = {
            "calls_started": self.counters.calls_started,
            "calls_ended": dict(self.counters.calls_ended),
            "turns_stored": self.counters.turns_stored,
            "errors": dict(self.counters.errors + (writes.failures if writes is not None else Counter())),
        }
        report["status"] = "degraded" if problems else "ok"
        if problems:
            report["problems"] = problems
        return report

    async def prometheus(self) -> bytes:
        """The same figures in Prometheus' text format."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_ReportCollector(await self.report()))
        return generate_latest(registry)


class _ReportCollector(Collector):
    def __init__(self, report: dict[str, Any]) -> None:
        self.report = report

    def collect(self) -> Iterator[Metric]:
        r = self.report
        info = InfoMetricFamily("memory_call_bot", "The running bot's version")
        info.add_metric([], {"version": str(r["version"])})
        yield info
        yield _gauge("memory_call_bot_up", "1 when the database answers", 0 if r["status"] == "unavailable" else 1)
        if r["status"] == "unavailable":
            return
        yield _gauge("memory_call_bot_database_ok", "1 when the database answers", 1)
        if "writable" in r["database"]:
            yield _gauge(
                "memory_call_bot_database_writable",
                "0 while the last write failed (disk full?)",
                r["database"]["writable"],
            )
        yield _gauge(
            "memory_call_bot_degraded", "1 while /healthz says degraded (see its problems)", bool(r.get("problems"))
        )
        yield _gauge("memory_call_bot_active_calls", "Calls not ended yet", r["calls"]["active"])
        yield _gauge("memory_call_bot_queue_depth", "Post-call jobs waiting or running", r["queue"]["depth"])
        oldest = r["queue"]["oldest_age_seconds"]
        yield _gauge("memory_call_bot_queue_oldest_age_seconds", "Age of the oldest post-call job", oldest or 0)
        if "discord" in r:
            yield _gauge(
                "memory_call_bot_discord_connected", "1 when the gateway is connected", r["discord"]["connected"]
            )
            latency = r["discord"]["latency_seconds"]
            if latency is not None:
                yield _gauge("memory_call_bot_discord_latency_seconds", "Gateway heartbeat latency", latency)
        agora = r["agora"]
        yield _gauge("memory_call_bot_agora_configured", "1 when Agora credentials are set", agora["configured"])
        if "reachable" in agora:
            yield _gauge("memory_call_bot_agora_reachable", "1 when the last Agora check passed", agora["reachable"])
        for key, value in r.items():  # figures other services add (numbers only)
            if _is_number(value):
                yield _gauge(f"memory_call_bot_{key}", key.replace("_", " "), value)
            elif isinstance(value, dict) and key not in ("database", "queue", "discord", "agora", "counters"):
                for name, number in value.items():
                    if _is_number(number) and (key, name) != ("calls", "active"):
                        yield _gauge(f"memory_call_bot_{key}_{name}", f"{key} {name}".replace("_", " "), number)
        c = r["counters"]
        started = CounterMetricFamily("memory_call_bot_calls_started", "Calls started since the process started")
        started.add_metric([], c["calls_started"])
        yield started
        ended = CounterMetricFamily("memory_call_bot_calls_ended", "Calls ended, by route", labels=["route"])
        for route, count in sorted(c["calls_ended"].items()):
            ended.add_metric([route], count)
        yield ended
        turns = CounterMetricFamily("memory_call_bot_turns_stored", "Lines stored by calls that ended")
        turns.add_metric([], c["turns_stored"])
        yield turns
        errors = CounterMetricFamily("memory_call_bot_errors", "Errors, by kind", labels=["kind"])
        for kind, count in sorted(c["errors"].items()):
            errors.add_metric([kind], count)
        yield errors


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=float(value))
