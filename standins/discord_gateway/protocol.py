"""Discord's numbers the fake speaks: the API prefix, interaction and callback types, message flags, which callback
answers which interaction, and the query-string booleans discord.py sends."""

from __future__ import annotations

from collections.abc import Mapping

API_PREFIX = "/api/v10"
JSON_CONTENT_TYPE = "application/json"  # exactly this string: discord.http.json_or_text compares with ==

# Interaction types (Discord API).
APPLICATION_COMMAND, MESSAGE_COMPONENT, AUTOCOMPLETE, MODAL_SUBMIT = 2, 3, 4, 5
# Interaction callback types.
CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE = 4, 5, 6, 7
AUTOCOMPLETE_RESULT, MODAL = 8, 9
# Message flags.
EPHEMERAL, LOADING = 1 << 6, 1 << 7
ADMINISTRATOR = 1 << 3

# Which callback types Discord accepts for which interaction type (PONG and activities are out of scope).
ALLOWED_CALLBACKS: dict[int, frozenset[int]] = {
    APPLICATION_COMMAND: frozenset({CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, MODAL}),
    MESSAGE_COMPONENT: frozenset({CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE, MODAL}),
    AUTOCOMPLETE: frozenset({AUTOCOMPLETE_RESULT}),
    MODAL_SUBMIT: frozenset({CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE}),
}

# Query-string booleans. The schema only says ``type: boolean``; discord.py 2.7.1 sends ``with_response=1``,
# ``wait=1`` and ``with_components=0`` (``int(bool)``), which real Discord accepts, so 1/0 count as booleans.
QUERY_BOOLEAN_LITERALS: Mapping[str, bool] = {"true": True, "false": False, "1": True, "0": False}
