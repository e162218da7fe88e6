"""Store finished conversations from a file as calls, through the same merge path as a live call's history."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from bot.memory.service import MemoryService
from bot.store.models import CallRecord, ConversationSummary, Role


class ImportStore(Protocol):
    """What an import writes: finished calls and their post-call jobs."""

    async def create_call(self, call: CallRecord) -> None: ...
    async def enqueue_job(self, kind: str, ref_id: str, at: float, *, not_before: float = 0.0) -> bool: ...


POST_CALL_JOB = "post_call"
POST_CHAT_JOB = "post_chat"


class ImportFormatError(ValueError):
    """The file is not one conversation or a list of conversations in the documented shape."""


@dataclass(frozen=True)
class Conversation:
    started_at: float
    messages: list[tuple[Role, str]]


def parse_conversations(data: Any) -> list[Conversation]:
    items = data if isinstance(data, list) else [data]
    if not items:
        raise ImportFormatError("the file holds an empty list: expected at least one conversation")
    conversations = []
    for n, item in enumerate(items, start=1):
        where = f"conversation {n}"
        if not isinstance(item, dict):
            raise ImportFormatError(f"{where}: expected an object with started_at and messages")
        try:
            started = datetime.fromisoformat(str(item["started_at"]).replace("Z", "+00:00"))
        except (KeyError, ValueError) as exc:
            raise ImportFormatError(f"{where}: started_at must be an ISO-8601 date and time") from exc
        if started.tzinfo is None:
            started = started.replace(tzinfo=UTC)
        messages = item.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ImportFormatError(f"{where}: messages must be a non-empty list")
        parsed = []
        for m, message in enumerate(messages, start=1):
            if (
                not isinstance(message, dict)
                or message.get("role") not in ("user", "assistant")
                or not isinstance(message.get("content"), str)
            ):
                raise ImportFormatError(
                    f'{where}, message {m}: expected {{"role": "user"|"assistant", "content": text}}'
                )
            parsed.append((message["role"], message["content"]))
        conversations.append(Conversation(started.timestamp(), parsed))
    return conversations


async def import_conversations(
    store: ImportStore, memory: MemoryService, user_id: int, conversations: list[Conversation]
) -> list[str]:
    """Each conversation becomes an ended call of the user, in order, queued for post-call processing."""
    call_ids = []
    for convo in conversations:
        call_id = f"import-{uuid.uuid4().hex[:16]}"
        call = CallRecord(
            call_id=call_id,
            user_id=user_id,
            guild_id=None,
            channel=call_id,
            agent_name=call_id,
            user_uid=0,
            agent_uid=0,
            state="ended",
            max_minutes=0,
            started_at=convo.started_at,
            ended_at=convo.started_at,
            end_reason="imported",
        )
        await store.create_call(call)
        await memory.record_snapshot(call, convo.messages, max_history=None, final=True, at=convo.started_at)
        await store.enqueue_job(POST_CALL_JOB, call_id, convo.started_at)
        call_ids.append(call_id)
    return call_ids


class PendingStore(Protocol):
    async def list_conversations(
        self, user_id: int, *, offset: int = 0, limit: int = 10
    ) -> list[ConversationSummary]: ...
    async def count_conversations(self, user_id: int) -> int: ...
    async def job_state(self, kind: str, ref_id: str) -> str | None: ...


async def pending_learning(store: PendingStore, user_id: int) -> list[str]:
    """The member's conversations whose post-call job (facts, summary: the running bot's, with an LLM) has not
    finished yet, as ``call <id>`` / ``chat <id>``: a block built now lacks what they will teach."""
    conversations = await store.list_conversations(user_id, limit=await store.count_conversations(user_id))
    pending = []
    for convo in conversations:
        kind = POST_CALL_JOB if convo.kind == "call" else POST_CHAT_JOB
        if await store.job_state(kind, convo.ref_id) in ("pending", "running"):
            pending.append(f"{convo.kind} {convo.ref_id}")
    return pending
