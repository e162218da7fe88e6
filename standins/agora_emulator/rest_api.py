"""The ConvoAI REST API (spec §4) on the emulator: authentication, the agent operations (join, leave, query, list,
update, history, turns, speak, interrupt, think) and the pipeline every request goes through (the clock ticks,
injected failures and held answers apply, the request is recorded)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import hmac
from collections.abc import Callable
from typing import Any, NamedTuple

from aiohttp import web

from bot.agora.tokens import verify_access_token_007, verify_rtc_token
from standins.agora_emulator.agents import EmulatedAgent
from standins.agora_emulator.contract import (
    API_PREFIX,
    LIST_DEFAULT_WINDOW_SECONDS,
    MAX_SPEAK_BYTES,
    SPEAK_PRIORITIES,
    STATUS_CODES,
    TERMINAL_STATUSES,
    TURNS_DEFAULT_PAGE_SIZE,
    TURNS_PAGE_SIZES,
    TURNS_RETENTION_SECONDS,
)
from standins.agora_emulator.faults import injected_response
from standins.agora_emulator.fields import (
    ApiError,
    check_object,
    check_optional_bool,
    check_system_messages,
    error_response,
    json_object_body,
    json_response,
    parse_states,
    query_int,
    required_text,
)
from standins.agora_emulator.join_validation import JoinValidator
from standins.agora_emulator.turns import session_turns


class RequestRecord(NamedTuple):
    method: str
    path: str
    status: int


class CallRecord(NamedTuple):
    operation: str
    status: int


class ConvoAIRoutes:
    """The emulator's ConvoAI routes, with every request and its operation's answer recorded."""

    def _init_rest_api(self) -> None:
        self.latency = 0.0
        self.requests: list[RequestRecord] = []
        self.calls: list[CallRecord] = []

    def count_calls(self, operation: str, status: int | None = None) -> int:
        return sum(1 for call in self.calls if call.operation == operation and status in (None, call.status))

    def _add_routes(self, app: web.Application) -> None:
        project = API_PREFIX + "/v2/projects/{appid}"
        agent = project + "/agents/{agent_id}"
        app.router.add_post(project + "/join", self._join, name="join")
        app.router.add_get(project + "/agents", self._list, name="list")
        app.router.add_get(agent, self._query, name="query")
        app.router.add_post(agent + "/leave", self._leave, name="leave")
        app.router.add_post(agent + "/update", self._update, name="update")
        app.router.add_get(agent + "/history", self._history, name="history")
        app.router.add_get(agent + "/turns", self._turns, name="turns")
        app.router.add_post(agent + "/speak", self._speak, name="speak")
        app.router.add_post(agent + "/interrupt", self._interrupt, name="interrupt")
        app.router.add_post(agent + "/think", self._think, name="think")

    @web.middleware
    async def _pipeline(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        operation = request.match_info.route.name or "unknown"
        response = await self._respond(request, handler, operation)
        gate = self._gates.get(operation)
        if gate is not None:
            gate.reached.set()
            await gate.opened.wait()
        if self.latency:
            await asyncio.sleep(self.latency)
        self.requests.append(RequestRecord(request.method, request.path, response.status))
        self.calls.append(CallRecord(operation, response.status))
        return response

    async def _respond(
        self, request: web.Request, handler: Callable[[web.Request], Any], operation: str
    ) -> web.StreamResponse:
        if operation == "unknown":
            try:
                return await handler(request)
            except web.HTTPException as exc:
                return error_response(exc.status, "NotFound" if exc.status == 404 else "InvalidRequest", exc.reason)
        self._tick()
        try:
            self._authenticate(request)
            injected = self._take_failure(operation, after_processing=False)
            if injected is not None:
                return injected_response(injected)
            response: web.StreamResponse = await handler(request)
        except ApiError as exc:
            return error_response(exc.status, exc.reason, exc.detail)
        injected = self._take_failure(operation, after_processing=True)
        if injected is not None:
            return injected_response(injected)
        return response

    def _authenticate(self, request: web.Request) -> None:
        header = request.headers.get("Authorization", "")
        scheme, _, credentials = header.partition(" ")
        if scheme.lower() == "agora":
            self._authenticate_token(credentials)
        elif scheme.lower() != "basic":
            raise ApiError(401, "InvalidPermission", "authentication failed: use Basic or agora token= auth")
        else:
            self._authenticate_basic(credentials)
        if request.match_info["appid"] != self.app_id:
            raise ApiError(401, "InvalidPermission", "authentication failed: credentials not valid for this app id")

    def _authenticate_token(self, credentials: str) -> None:
        name, sep, token = credentials.strip().partition("=")
        if name != "token" or not sep or not token:
            raise ApiError(401, "InvalidPermission", "authentication failed: expected agora token=<token>")
        problem = verify_access_token_007(token, self.app_id, self.app_certificate, self.now())
        if problem is not None:
            raise ApiError(401, "InvalidPermission", f"authentication failed: {problem}")

    def _authenticate_basic(self, credentials: str) -> None:
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise ApiError(401, "InvalidPermission", "authentication failed: malformed Basic credentials") from None
        customer_id, _, customer_secret = decoded.partition(":")
        expected = f"{self.customer_id}:{self.customer_secret}".encode()
        if not hmac.compare_digest(f"{customer_id}:{customer_secret}".encode(), expected):
            raise ApiError(401, "InvalidPermission", "authentication failed")

    async def _join(self, request: web.Request) -> web.Response:
        body = await json_object_body(request)
        properties = JoinValidator(body, self._check_agent_token).validate()
        name = body["name"]
        for existing in self.agents.values():
            if existing.name == name and existing.status not in TERMINAL_STATUSES:
                raise ApiError(409, "TaskConflict", f"task conflict: agent name {name} already exists")
        active = sum(1 for existing in self.agents.values() if existing.status not in TERMINAL_STATUSES)
        if active >= self.max_concurrent:
            raise ApiError(422, "ConcurrencyLimitExceeded", "concurrency limit exceeded")
        agent = self._create_agent(body, properties)
        return json_response(200, {"agent_id": agent.agent_id, "create_ts": agent.create_ts, "status": agent.status})

    def _agent_or_404(self, request: web.Request, *, running: bool) -> EmulatedAgent:
        agent = self.agents.get(request.match_info["agent_id"])
        if agent is None or (running and not agent.is_active):
            raise ApiError(404, "TaskNotFound", "task not found")
        return agent

    async def _leave(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=True)
        self._stop_agent(agent, "STOPPED", "OK")
        return json_response(200, {})

    async def _query(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=False)
        return json_response(
            200,
            {
                "message": f"agent exits with reason: {agent.message}" if agent.message else "",
                "start_ts": agent.start_ts,
                "stop_ts": agent.stop_ts or 0,
                "status": agent.status,
                "name": agent.name,
                "agent_id": agent.agent_id,
            },
        )

    async def _list(self, request: web.Request) -> web.Response:
        query = request.query
        now = int(self.now())
        states = parse_states(query.get("state", "2"))
        from_time = query_int(query, "from_time", now - LIST_DEFAULT_WINDOW_SECONDS)
        to_time = query_int(query, "to_time", now)
        limit = query_int(query, "limit", 20)
        if limit < 1:
            raise ApiError(400, "InvalidFieldValue", "limit must be at least 1")
        channel = query.get("channel")
        matching = sorted(
            (
                agent
                for agent in self.agents.values()
                if STATUS_CODES[agent.status] in states
                and from_time <= agent.start_ts <= to_time
                and (channel is None or agent.channel == channel)
            ),
            key=lambda agent: agent.sequence,
        )
        start = 0
        cursor = query.get("cursor")
        if cursor:
            cursor_agent = self.agents.get(cursor)
            if cursor_agent is None:
                raise ApiError(400, "InvalidFieldValue", f"cursor {cursor} is not a known agent_id")
            start = next(
                (i for i, agent in enumerate(matching) if agent.sequence >= cursor_agent.sequence),
                len(matching),
            )
        page = matching[start : start + limit]
        rest = matching[start + limit :]
        return json_response(
            200,
            {
                "data": {
                    "count": len(page),
                    "list": [
                        {"start_ts": agent.start_ts, "status": agent.status, "agent_id": agent.agent_id}
                        for agent in page
                    ],
                },
                "meta": {"cursor": rest[0].agent_id if rest else "", "total": len(matching)},
                "status": "ok",
            },
        )

    async def _update(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=True)
        body = await json_object_body(request)
        properties = body.get("properties")
        if properties is None:
            raise ApiError(400, "MissingRequiredField", "properties is required")
        if not isinstance(properties, dict):
            raise ApiError(400, "InvalidFieldValue", "properties must be an object")
        token = properties.get("token")
        if token is not None:
            enable_rtm = bool((agent.properties.get("advanced_features") or {}).get("enable_rtm"))
            self._check_agent_token(token, agent.channel, agent.agent_rtc_uid, enable_rtm=enable_rtm)
        for section in ("llm", "mllm"):
            if properties.get(section) is not None:
                check_object(properties[section], f"properties.{section}")
        llm_update = properties.get("llm") or {}
        if llm_update.get("system_messages") is not None:
            check_system_messages(llm_update["system_messages"])
        for section in ("llm", "mllm"):
            params = (properties.get(section) or {}).get("params")
            if params is not None:
                check_object(params, f"properties.{section}.params")
        if token is not None:
            agent.properties["token"] = token
        for section in ("llm", "mllm"):
            updates = properties.get(section) or {}
            for key in ("system_messages", "params"):
                if updates.get(key) is not None:
                    agent.properties.setdefault(section, {})[key] = copy.deepcopy(updates[key])
        agent.updates.append(copy.deepcopy(body))
        return json_response(200, {"agent_id": agent.agent_id, "create_ts": agent.create_ts, "status": agent.status})

    async def _history(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=True)
        if agent.status != "RUNNING":
            raise ApiError(404, "TaskNotFound", "history is only available while the agent is running")
        return json_response(
            200,
            {
                "agent_id": agent.agent_id,
                "start_ts": agent.start_ts,
                "status": "RUNNING",
                "contents": agent.history_contents(),
            },
        )

    async def _turns(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=False)
        if agent.stop_ts is not None and not agent.is_active and self.now() - agent.stop_ts > TURNS_RETENTION_SECONDS:
            raise ApiError(404, "TaskNotFound", "turns are kept for sessions of the last 7 days")
        page_index = query_int(request.query, "page_index", 1)
        page_size = query_int(request.query, "page_size", TURNS_DEFAULT_PAGE_SIZE)
        if page_index < 1:
            raise ApiError(400, "InvalidFieldValue", "page_index must be at least 1")
        low, high = TURNS_PAGE_SIZES
        if not low <= page_size <= high:
            raise ApiError(400, "InvalidFieldValue", f"page_size must be between {low} and {high}")
        turns = session_turns(agent)
        total_pages = max(1, -(-len(turns) // page_size))
        return json_response(
            200,
            {
                "agent_id": agent.agent_id,
                "name": agent.name,
                "channel": agent.channel,
                "total_turn_count": len(turns),
                "pagination": {
                    "page_index": page_index,
                    "total_pages": total_pages,
                    "is_last_page": page_index >= total_pages,
                },
                "turns": turns[(page_index - 1) * page_size : page_index * page_size],
            },
        )

    async def _speak(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=True)
        body = await json_object_body(request)
        text = required_text(body, "text")
        if len(text.encode()) > MAX_SPEAK_BYTES:
            raise ApiError(400, "InvalidFieldValue", f"text must be at most {MAX_SPEAK_BYTES} bytes")
        priority = body.get("priority")
        if priority is not None and priority not in SPEAK_PRIORITIES:
            raise ApiError(400, "InvalidFieldValue", f"priority must be one of {sorted(SPEAK_PRIORITIES)}")
        check_optional_bool(body, "interruptable", "interruptable")
        agent.spoken.append(body)
        return self._agent_brief(agent)

    async def _interrupt(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=True)
        if (await request.read()).strip():
            await json_object_body(request)
        agent.interrupts += 1
        return self._agent_brief(agent)

    async def _think(self, request: web.Request) -> web.Response:
        agent = self._agent_or_404(request, running=True)
        body = await json_object_body(request)
        text = required_text(body, "text")
        allowed_actions = {
            "on_listening_action": {"interrupt", "inject", "ignore"},
            "on_thinking_action": {"interrupt", "ignore"},
            "on_speaking_action": {"interrupt", "ignore"},
        }
        for key, allowed in allowed_actions.items():
            if body.get(key) is not None and body[key] not in allowed:
                raise ApiError(400, "InvalidFieldValue", f"{key} must be one of {sorted(allowed)}")
        check_optional_bool(body, "interruptable", "interruptable")
        agent.thoughts.append(body)
        self._append(agent, "user", f"[think API injected] {text}", "command")
        return self._agent_brief(agent)

    @staticmethod
    def _agent_brief(agent: EmulatedAgent) -> web.Response:
        return json_response(200, {"agent_id": agent.agent_id, "channel": agent.channel, "start_ts": agent.start_ts})

    def _check_agent_token(self, token: Any, channel: str, uid: str, *, enable_rtm: bool) -> None:
        if not isinstance(token, str) or not token:
            raise ApiError(400, "InvalidFieldValue", "properties.token must be a non-empty string")
        problem = verify_rtc_token(
            token, self.app_id, self.app_certificate, channel, uid, self.now(), need_rtm=enable_rtm
        )
        if problem is not None:
            raise ApiError(400, "InvalidFieldValue", f"properties.token is invalid: {problem}")
