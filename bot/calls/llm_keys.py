"""Per-call keys for the bot's LLM route (live recall).

A key is `mcl_<call id>_<43 url-safe characters>`: 32 random bytes after the call id. Only its SHA-256 is stored
(a key has 256 bits of entropy, so a fast hash is enough); a presented key is hashed and compared with the stored
hash in constant time. The call id lets the route find the call without searching by secret.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "mcl"
SECRET_BYTES = 32


def new_llm_key(call_id: str) -> str:
    if "_" in call_id:
        raise ValueError("call ids must not contain '_'")
    return f"{KEY_PREFIX}_{call_id}_{secrets.token_urlsafe(SECRET_BYTES)}"


def hash_llm_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def call_id_of(key: str) -> str | None:
    """The call a key claims to belong to, or None when it is not shaped like one of ours."""
    prefix, sep, rest = key.partition("_")
    call_id, sep2, secret = rest.partition("_")
    if prefix != KEY_PREFIX or not sep or not sep2 or not call_id or len(secret) < 43 or len(key) > 200:
        return None
    return call_id


def key_matches(key: str, stored_hash: str | None) -> bool:
    if not stored_hash:
        return False
    return hmac.compare_digest(hash_llm_key(key).encode(), stored_hash.encode())
