"""Per-member encryption keys (crypto-shredding): the crypto primitives, search-term hashing and the key store.

Nothing here imports discord or the memory store; the store and the memory service use it."""

from bot.keys.crypto import (
    MASTER_KEY_ENV,
    DecryptionFailed,
    InvalidMasterKey,
    MemberCipher,
    generate_master_key_text,
    parse_master_key,
)
from bot.keys.store import KeyStoreLocked, MemberKeys, SqliteKeyStore, check_unlockable

__all__ = [
    "MASTER_KEY_ENV",
    "DecryptionFailed",
    "InvalidMasterKey",
    "KeyStoreLocked",
    "MemberCipher",
    "MemberKeys",
    "SqliteKeyStore",
    "check_unlockable",
    "generate_master_key_text",
    "parse_master_key",
]
