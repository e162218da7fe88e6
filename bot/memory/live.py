"""Live recall: the bot is the voice agent's LLM, so every turn gets the memory that fits that utterance and every
line is stored the moment it is spoken.

For each chat-completions request the agent sends (Agora ConvoAI with ``llm.vendor = "custom"``; what its fields
mean and which are forwarded: ``bot.agora.custom_llm``):

1. the memory block for the newest user message replaces the memory system message (persona and history stay as
   sent, less the lines the member forgot while the call ran: ``bot.memory.live_forgotten``), leaving out the lines
   of the running call, which the agent already holds;
2. when the request answers the member's own words, that message is stored as a line of the call (keyed by
   Agora's ``turn_id``) with the agent's history before it (a reply the member interrupted as what they heard),
   written while the next steps run: the reply's first bytes do not wait for the database, and the reply is stored
   after the line;
3. the request, as an OpenAI-compatible server accepts it, goes to the upstream LLM (``llm.base_url`` /
   ``llm.model``), retried once only before its first byte, within ``llm.timeout_seconds``;
4. the upstream's SSE events are relayed as they arrive, byte for byte (tool calls and unknown fields included),
   but for the calls of the memory tools the bot added (``bot.memory.tools``: carried out here, at most
   ``MAX_ROUNDS`` rounds whatever the model does), which never reach the agent; an answer that also calls the
   agent's own tools ends as a call of those, which Agora's engine runs (``bot.memory.engine_tools``);
5. the reply as actually sent is stored: before the final ``data: [DONE]`` is relayed (so a reply the agent saw
   finish is never lost to a crash), or when the agent hung up mid-reply (an interrupted reply; the agent's next
   request says what was heard of it, and the line is cut to that). A reply the upstream broke off is not stored:
   the agent speaks and keeps its failure message instead, and the error event is followed by ``data: [DONE]``.

Private calls and paused memory: the request is answered, but no memory is read or written. No request or reply
text is ever logged. Nothing here knows HTTP servers: ``bot.web.llm_route`` adapts this to aiohttp.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bot.agora.custom_llm import AgentRequest, Speaker, read_request
from bot.llm.client import LLMClient, UpstreamStream
from bot.llm.errors import LLMError
from bot.memory.context import MEMORY_HEADER
from bot.memory.engine_tools import EngineAnswers
from bot.memory.live_forgotten import ForgottenLines
from bot.memory.own_words import OwnWords
from bot.memory.service import MemoryService
from bot.memory.tools import DROP, ToolCalls, ToolTurn, offered
from bot.store.models import CallMemoryState, CallRecord, Conversation
from bot.web.llm_backend import LLMRouteError, bad_request, unauthorized

log = logging.getLogger(__name__)

ATTEMPTS = 2
"""The upstream is tried at most twice, and only until its first byte."""
DONE_EVENT = "[DONE]"


def error_event(message: str, code: str) -> bytes:
    """An SSE event carrying an OpenAI-format error, for a failure after the stream started."""
    payload = {"error": {"message": message, "type": "server_error", "param": None, "code": code}}
    return f"data: {json.dumps(payload)}\n\n".encode()


@dataclass
class _Reply:
    """What was relayed so far: the content deltas of every event the agent was sent; ``settled`` once it was
    stored, or once it is known that it must not be."""

    parts: list[str] = field(default_factory=list)
    settled: bool = False

    @property
    def text(self) -> str:
        return "".join(self.parts)


class LiveTurn:
    """One request in flight: its first upstream bytes are already here; ``events()`` relays the rest."""

    def __init__(
        self,
        recall: LiveRecall,
        call: CallRecord,
        request: AgentRequest,
        remember: bool,
        generation: int,
        response: UpstreamStream,
        chunks: AsyncGenerator[bytes],
        first: bytes,
        line_write: asyncio.Future[None] | None = None,
        tools: ToolTurn | None = None,
    ) -> None:
        """``line_write``: the write of the user line this turn answers, still running while the reply starts.
        ``tools``: the memory tools were offered (their calls are carried out, not relayed)."""
        self._recall = recall
        self._call = call
        self._request = request
        self._remember = remember
        self._generation = generation
        self._response = response
        self._chunks = chunks
        self._first = first
        self._line_write = line_write
        self._tools = tools
        self._said_from = 0
        """Where in the reply's parts the current round of the model's answer starts (``tools``)."""
        self._reply = _Reply()
        self._finished = False
        self.content_type = response.content_type
        self.is_sse = self.content_type.startswith("text/event-stream")

    async def events(self) -> AsyncGenerator[bytes]:
        """The upstream's bytes, unchanged, as whole SSE events: the complete events of each read from the
        upstream together (one write to the agent instead of one per event, and nothing held back that has
        arrived). A delta counts as sent once the consumer asks for more (its write succeeded); closing this
        generator early stores the reply as sent so far."""
        buffer = self._first
        done = False
        try:
            if not self.is_sse:
                async for chunk in self._chunks:
                    buffer += chunk
                self._reply.parts.append(_completion_text(buffer))
                await self._store_reply()
                yield buffer
                return
            tools = self._tools
            while True:
                while True:
                    events: list[bytes] = []
                    deltas: list[str] = []
                    while (cut := _event_end(buffer)) is not None:
                        event, buffer = buffer[:cut], buffer[cut:]
                        data = _event_data(event)
                        if data == DONE_EVENT:  # the reply is stored once every delta before it was sent
                            if events:
                                yield b"".join(events)
                                self._reply.parts.extend(deltas)
                                events, deltas = [], []
                            if tools is not None and tools.calls.pending:
                                if tools.asks_again:
                                    continue  # the model answers after the tools are carried out
                                await self._beside_engine(tools)
                            await self._store_reply()
                            done = True
                            yield event
                            continue
                        parsed = _chunk(data)
                        if tools is not None and b'"tool_calls"' in event:
                            taken = tools.calls.take(parsed)
                            if taken == DROP:
                                continue
                            if isinstance(taken, dict):
                                parsed = taken
                                event = f"data: {json.dumps(taken)}\n\n".encode()
                        events.append(event)
                        if delta := _delta_text(parsed):
                            deltas.append(delta)
                    if events:
                        yield b"".join(events)
                        self._reply.parts.extend(deltas)
                    try:
                        chunk = await anext(self._chunks)
                    except StopAsyncIteration:
                        break
                    buffer += chunk
                if tools is None or not tools.asks_again:
                    break
                buffer = await self._ask_again(tools)
            if buffer:
                yield buffer
        except (LLMError, LLMRouteError) as exc:
            log.warning("call %s: the upstream LLM failed mid-reply: %s", self._call.call_id, type(exc).__name__)
            self._reply.settled = True  # the agent keeps its failure message in the reply's place, not this
            yield error_event("The language model stopped answering mid-reply.", "upstream_interrupted")
            yield f"data: {DONE_EVENT}\n\n".encode()
        except Exception:
            # Whatever failed, the agent gets an end it can act on (its failure message) instead of waiting for
            # its timeout.
            log.exception("call %s: relaying the reply failed", self._call.call_id)
            if not done:
                self._reply.settled = True
                yield error_event("The reply could not be completed.", "relay_failed")
                yield f"data: {DONE_EVENT}\n\n".encode()
        finally:
            await self._finish()

    async def _beside_engine(self, tools: ToolTurn) -> None:
        """The answer ends with calls of ours the model may not be asked again about: past the last round they
        are dropped; beside calls of the agent's own tools, they are carried out now and the agent's engine runs
        its part, and its follow-up request gets ours put back (``EngineAnswers``) so the model sees all it did."""
        if tools.calls.theirs and not tools.calls.last_round:
            called, their_ids, rounds = tools.calls.called(), list(tools.calls.their_ids), tools.rounds
            results = await tools.carry_out()
            self._recall.engine_answers.keep(self._call.call_id, their_ids, called, results, rounds, self._generation)
        tools.drop()

    async def _ask_again(self, tools: ToolTurn) -> bytes:
        """Carry out the memory tools the model called, for this call's member only, and ask the model again with
        the results; its answer's first bytes (the rest comes through ``self._chunks``)."""
        request = await tools.ask_again("".join(self._reply.parts[self._said_from :]))
        await self._chunks.aclose()
        await self._response.aclose()
        self._response, self._chunks, first = await self._recall.open_upstream(self._call, request)
        self._said_from = len(self._reply.parts)
        return first

    async def close(self) -> None:
        """Release the upstream response and store the reply as sent; for a turn whose ``events()`` never ran
        (closing an async generator that never started runs none of its code). Idempotent."""
        await self._finish()

    async def _finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        # Shielded: a cancelled request handler (the agent hung up) must still store what was sent.
        task = asyncio.ensure_future(self._close_and_store())
        self._recall.track(task)
        await asyncio.shield(task)

    async def _close_and_store(self) -> None:
        await self._chunks.aclose()
        await self._response.aclose()
        await self._store_reply()

    async def _store_reply(self) -> None:
        if self._reply.settled:
            return
        self._reply.settled = True
        if self._line_write is not None:  # a reply is stored after the line it answers
            await asyncio.shield(self._line_write)
        text = self._reply.text
        if not self._remember or not text.strip():
            return
        window: list[tuple[Speaker, str]] = [*self._request.transcript, ("assistant", text)]
        await self._recall.store_line(self._call, self._request, window, "assistant", self._generation)


class CallSession:
    """A request with a valid key: the call it belongs to, and its member's memory state read with it."""

    def __init__(self, recall: LiveRecall, state: CallMemoryState) -> None:
        self.recall = recall
        self.state = state
        self.call = state.call

    async def start_turn(self, request: object) -> LiveTurn:
        return await self.recall.start_turn(self.state, request)


class LiveRecall:
    def __init__(
        self,
        memory: MemoryService,
        llm: LLMClient,
        *,
        authorize: Callable[[str], Awaitable[CallMemoryState | None]],
        max_history: int,
        timeout_seconds: float,
        clock: Callable[[], float] = time.time,
        own_words: OwnWords | None = None,
    ) -> None:
        """``own_words``: offer the model the memory tools (remember, correct, forget) while memory is on."""
        self.memory = memory
        self.llm = llm
        self.own_words = own_words
        self._authorize = authorize
        self.max_history = max_history
        self.timeout_seconds = timeout_seconds
        self.clock = clock
        self._tasks: set[asyncio.Future[None]] = set()
        self.engine_answers = EngineAnswers()
        self.forgotten = ForgottenLines(memory.store)

    def track(self, task: asyncio.Future[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_idle(self) -> None:
        """Wait for reply writes that outlived their request (an agent that hung up mid-reply)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def authorize(self, api_key: str | None) -> CallSession:
        state = await self._authorize(api_key) if api_key else None
        if state is None:
            raise unauthorized()
        return CallSession(self, state)

    async def start_turn(self, state: CallMemoryState, request: object) -> LiveTurn:
        """Store the new user line, put this utterance's memory in, and open the upstream stream; the line's write
        is under way when this returns (the turn's reply is stored after it). ``state`` is the call with its
        member's memory state, read by the key check (the request's first read)."""
        call = state.call
        if not isinstance(request, dict):
            raise bad_request("The request body must be a JSON object.")
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise bad_request("'messages' must be a non-empty array of message objects.")
        if not _encodable(request):
            raise bad_request("The request holds text that is not valid Unicode (a lone surrogate).")
        agent = read_request(request, messages)
        agent.upstream["messages"] = await self.forgotten.upstream(state, agent, messages)
        utterance = agent.utterance
        # Read before anything else, with the key check: a forget or a pause from then on fences out this turn's
        # writes (forget wins).
        generation = state.generation
        remember = not call.private and state.enabled
        write: asyncio.Future[None] | None = None
        outgoing = agent.upstream
        try:
            outgoing["messages"] = await self._with_memory(state, outgoing["messages"], utterance, remember)
        finally:
            if remember and agent.member_spoke_last and utterance.strip():
                # Started once the memory is built, or failed to be (the two would only take turns at the GIL),
                # so that it runs while the upstream is asked and the reply's first bytes are relayed: the agent
                # does not wait for the database (a write queued behind other calls' held the first byte up to
                # several ms). It commits within milliseconds, long before a reply has finished streaming, and
                # the reply is stored only after it (`LiveTurn._store_reply`).
                write = asyncio.ensure_future(self.store_line(call, agent, agent.transcript, "user", generation))
                self.track(write)
        tools: ToolTurn | None = None
        rounds = 0
        if self.engine_answers.holds(call.call_id):
            outgoing["messages"], rounds = self.engine_answers.spliced(call.call_id, outgoing["messages"], generation)
        if remember and self.own_words is not None and outgoing.get("stream") is True:
            outgoing["tools"], ours = offered(outgoing.get("tools"))
            convo = Conversation("call", call.call_id)
            tools = ToolTurn(self.own_words, call.user_id, convo, generation, outgoing, ToolCalls(ours), rounds)
        try:
            response, chunks, first = await self._open(call, outgoing)
        except BaseException:
            if write is not None:  # the agent's error comes after the line is stored (or failed to be)
                await asyncio.shield(write)
            raise
        return LiveTurn(self, call, agent, remember, generation, response, chunks, first, write, tools)

    async def open_upstream(
        self, call: CallRecord, request: dict[str, Any]
    ) -> tuple[UpstreamStream, AsyncGenerator[bytes], bytes]:
        """The upstream response to ``request`` and its first bytes, as for a turn's first request."""
        return await self._open(call, request)

    async def store_line(
        self,
        call: CallRecord,
        agent: AgentRequest,
        window: list[tuple[Speaker, str]],
        role: Speaker,
        generation: int,
    ) -> None:
        """Store the newest line of ``window`` (the agent's transcript, then the line) under the turn's key."""
        turn_id = agent.turn_id
        key = f"{turn_id}:{role}" if isinstance(turn_id, int | str) and not isinstance(turn_id, bool) else None
        try:
            await self.memory.record_live_turn(
                call,
                window,
                max_history=self.max_history,
                turn_key=key,
                at=self.clock(),
                generation=generation,
                heard=agent.heard,
            )
        except Exception:
            # The checkpoints and webhook 103 still carry the line; the member's turn must not fail for it.
            log.exception("call %s: storing a %s line failed; the next checkpoint will carry it", call.call_id, role)

    async def _with_memory(
        self, state: CallMemoryState, messages: list[dict[str, Any]], utterance: str, remember: bool
    ) -> list[dict[str, Any]]:
        """The agent's messages with the memory system message replaced by this utterance's (or removed when
        memory is off); the persona and the agent's history stay as sent."""
        kept = [m for m in messages if not _is_memory_message(m)]
        if not remember:
            return kept
        # Memory is on (checked just now, with the generation): the builder only reads what it quotes, from the
        # member's index when it is as current as the stamp read with the key check.
        call = state.call
        context = await self.memory.context.build(
            call.user_id, query=utterance or None, exclude_call_id=call.call_id, stamp=state.stamp
        )
        memory = [m for m in context if _is_memory_message(m)]
        if not memory:
            return kept
        at = 0
        while at < len(kept) and kept[at].get("role") == "system":
            at += 1
        return [*kept[:at], *memory, *kept[at:]]

    async def _open(
        self, call: CallRecord, outgoing: dict[str, Any]
    ) -> tuple[UpstreamStream, AsyncGenerator[bytes], bytes]:
        """The upstream response and its first bytes; one retry, only before the first byte, within the timeout."""
        failure = "upstream_error"
        refused: int | None = None
        try:
            async with asyncio.timeout(self.timeout_seconds):
                for attempt in range(1, ATTEMPTS + 1):
                    response: UpstreamStream | None = None
                    chunks: AsyncGenerator[bytes] | None = None
                    try:
                        response = await self.llm.open_stream(outgoing, max_retries=0)
                        chunks = response.chunks()
                        first = b""
                        while not first:
                            first = await anext(chunks)
                        return response, chunks, first
                    except BaseException as exc:
                        if chunks is not None:
                            await chunks.aclose()
                        if response is not None:
                            await response.aclose()
                        if not isinstance(exc, LLMError | StopAsyncIteration):
                            raise  # the timeout (or a cancellation), with the upstream released
                        status = getattr(exc, "status", None)
                        log.warning(
                            "call %s: upstream LLM attempt %d of %d failed: %s%s",
                            call.call_id,
                            attempt,
                            ATTEMPTS,
                            type(exc).__name__,
                            f" ({status})" if status else "",
                        )
                        if status is not None and status < 500 and status != 429:
                            refused = status
                            break  # the upstream refused this request: asking again gets the same answer
        except TimeoutError:
            failure = "upstream_timeout"
            log.warning("call %s: upstream LLM gave no first byte within %g s", call.call_id, self.timeout_seconds)
        if refused in (401, 403):
            log.error("call %s: the upstream LLM refused the bot's credentials: check llm.api_key", call.call_id)
        elif refused is not None:
            raise LLMRouteError(
                400,
                f"The language model refused this request as invalid (HTTP {refused}).",
                error_type="invalid_request_error",
                code="upstream_refused",
            )
        if failure == "upstream_timeout":
            raise LLMRouteError(
                504,
                f"The language model did not answer within {self.timeout_seconds:g} s.",
                error_type="server_error",
                code=failure,
            )
        raise LLMRouteError(
            502, "The language model is not available right now.", error_type="server_error", code=failure
        )


def _encodable(request: dict[str, Any]) -> bool:
    """JSON may spell a lone surrogate (\\ud800), which no UTF-8 text (the store, the upstream) can hold."""
    try:
        json.dumps(request, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_memory_message(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return message.get("role") == "system" and isinstance(content, str) and content.startswith(MEMORY_HEADER)


def _event_end(buffer: bytes) -> int | None:
    """The end of the first complete SSE event in ``buffer`` (after its blank line), or None."""
    ends = [i + len(sep) for sep in (b"\n\n", b"\r\n\r\n", b"\r\r") if (i := buffer.find(sep)) >= 0]
    return min(ends) if ends else None


def _event_data(event: bytes) -> str:
    lines = event.decode("utf-8", "replace").splitlines()
    return "\n".join(line[5:].lstrip(" ") for line in lines if line.startswith("data:"))


def _chunk(data: str) -> dict[str, Any]:
    """One event's JSON chunk, read once; an empty one for anything else (it passes through unread)."""
    try:
        chunk = json.loads(data)
    except ValueError:
        return {}
    return chunk if isinstance(chunk, dict) else {}


def _delta_text(chunk: dict[str, Any]) -> str:
    """The content delta of one chunk, for storing the reply."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    delta = choices[0].get("delta")
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) else ""


def _completion_text(body: bytes) -> str:
    try:
        data = json.loads(body)
        content = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""
