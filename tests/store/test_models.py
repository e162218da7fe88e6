"""The conversation value type and the consent rule: each written once, used by both backends and the services."""

from __future__ import annotations

import pytest

from bot.store.models import Conversation, UserRecord, needs_consent, remembers


def test_a_conversation_knows_its_table_and_column() -> None:
    call, chat = Conversation.of(call_id="c1"), Conversation.of(chat_id="h1")
    assert (call.kind, call.table, call.column, call.ref_id) == ("call", "calls", "call_id", "c1")
    assert (chat.kind, chat.table, chat.column, chat.ref_id) == ("chat", "chats", "chat_id", "h1")
    assert Conversation.named("chat", "h1") == chat
    with pytest.raises(ValueError, match="needs a call_id or a chat_id"):
        Conversation.of()
    with pytest.raises(ValueError, match="unknown conversation kind"):
        Conversation.named("post_call", "c1")


@pytest.mark.parametrize(
    ("consent", "enabled", "private", "remembered"),
    [("remember", True, False, True), ("remember", True, True, False), ("remember", False, False, False),
     ("no_memory", True, False, False), (None, True, False, False)],
)  # fmt: skip
def test_the_consent_rule(consent: str | None, enabled: bool, private: bool, remembered: bool) -> None:
    user = UserRecord(user_id=1, memory_enabled=enabled, consent=consent, consent_at=None, created_at=0.0)  # type: ignore[arg-type]
    assert remembers(user, private=private) is remembered
    assert needs_consent(user) is (consent is None)
    assert not remembers(None) and needs_consent(None)
