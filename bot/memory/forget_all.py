"""Forgetting everything of a member in an order a kill at any step cannot break, and the one seam a crash test
stops a process at.

Three steps, each committed on its own:

1. ``begun``: the member's generation moves and the forget is recorded as under way, in the memory database
   (``Store.begin_forget``). From then on every write of their memory is refused by its own transaction's fence, in
   every process: nothing is sealed, and kept, under the key about to be deleted.
2. ``key_deleted``: their key is destroyed in the key store (with member encryption): from then on nothing of
   theirs can be decrypted, in any copy of the database.
3. ``rows_deleted``: their rows are deleted, the generation moves again and the forget is no longer under way
   (``Store.forget_user(begun=...)``), so every process reads the member's key afresh: a new one, made at their next
   write.

A kill between two steps leaves the forget under way: the member's writes stay refused until the next start, the
periodic sweep of any running bot, ``check`` or the next ``forget-user`` finishes it
(``MemoryService.finish_interrupted_forgets``), which runs the three steps again. The generation each beginning
sets is what its end clears, so a forget finished twice at once (the sweep of another process finding one still
under way) ends only once the last of them has deleted the rows after the key.

``PAUSE_ENV`` is for tests only: a process started with it set to a step's name writes ``forget paused at
<step>`` to standard error once that step is committed and waits there (its other tasks go on) until it is
killed (``tests/e2e/test_forget_killed.py``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Protocol

from bot.keys import MemberKeys
from bot.store.models import ForgetResult

STEPS = ("begun", "key_deleted", "rows_deleted")
PAUSE_ENV = "BOT_TEST_PAUSE_FORGET_AT"


class ForgetAllStore(Protocol):
    async def begin_forget(self, user_id: int) -> int: ...
    async def forget_user(self, user_id: int, *, begun: int | None = None) -> ForgetResult: ...


async def _reached(step: str) -> None:
    if os.environ.get(PAUSE_ENV) != step:
        return
    sys.stderr.write(f"forget paused at {step}\n")
    sys.stderr.flush()
    await asyncio.Event().wait()


async def forget_in_steps(store: ForgetAllStore, keys: MemberKeys | None, user_id: int) -> ForgetResult:
    """The member's key (when there is a key store) and every row of theirs, in the module's order."""
    begun = await store.begin_forget(user_id)
    await _reached("begun")
    if keys is not None:
        await keys.delete(user_id)
        await _reached("key_deleted")
    result = await store.forget_user(user_id, begun=begun)
    await _reached("rows_deleted")
    return result
