"""Crypto-shredding primitives: the master key, member data keys, per-value AES-256-GCM, keyed term hashes.

- The **master key** (``MEMORY_MASTER_KEY``, 32 random bytes as URL-safe base64) only wraps member keys; it never
  encrypts memory itself, so rotating it rewraps the member keys and touches no data.
- Each member has a random 256-bit **data key**. Two sub-keys are derived from it with HKDF-SHA256: one for
  AES-256-GCM over every value, one for HMAC-SHA256 of search terms. Destroying the data key makes both useless.
- Every value gets a fresh 96-bit nonce; the member ID and the column (``"turns.content"``) are bound in as
  associated data, so a ciphertext moved to another member's row or another column fails authentication with
  ``DecryptionFailed`` instead of decrypting to something.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from bot.config import decode_master_key
from bot.invocation import bot_command

KEY_BYTES = 32
NONCE_BYTES = 12
VALUE_VERSION = b"\x01"
"""First byte of every ciphertext this module writes (a later format can be told apart)."""
TERM_HASH_BYTES = 10
"""80 bits of HMAC per term: collisions within one member's vocabulary are negligible, the index stays small."""
MASTER_KEY_ENV = "MEMORY_MASTER_KEY"


class KeyError_(Exception):
    """Base of the errors of this package (not the builtin ``KeyError``)."""


class InvalidMasterKey(KeyError_):
    """The text given as a master key is not one (wrong length or not base64)."""


class DecryptionFailed(KeyError_):
    """A value did not authenticate: another member's or column's ciphertext, a wrong key, or a damaged value."""

    def __init__(self, user_id: int, column: str):
        self.user_id = user_id
        self.column = column
        super().__init__(
            f"a value of {column} did not decrypt for member {user_id}: it belongs to another member or column, "
            "or was damaged"
        )


def generate_master_key_text() -> str:
    """A new master key as it goes into ``.env`` (URL-safe base64 of 32 random bytes)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def parse_master_key(text: str) -> bytes:
    """The 32 bytes of a master key given as text; ``InvalidMasterKey`` says what is wrong, never the key."""
    raw = decode_master_key(text)
    if raw is None:
        raise InvalidMasterKey(
            f"{MASTER_KEY_ENV} must be {KEY_BYTES} bytes in URL-safe base64: create one with `{bot_command('keygen')}`"
        )
    return raw


def master_key_fingerprint(master_key: bytes) -> str:
    """A short, one-way label of a master key (safe to print: it reveals nothing usable)."""
    return hashlib.sha256(b"memory-call master key fingerprint" + master_key).hexdigest()[:12]


def new_data_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def _wrap_aad(user_id: int) -> bytes:
    return f"memory-call/member-key/{int(user_id)}".encode()


def wrap_data_key(master_key: bytes, user_id: int, data_key: bytes) -> bytes:
    """The member's data key encrypted under the master key, bound to the member ID."""
    nonce = os.urandom(NONCE_BYTES)
    return VALUE_VERSION + nonce + AESGCM(master_key).encrypt(nonce, data_key, _wrap_aad(user_id))


def unwrap_data_key(master_key: bytes, user_id: int, wrapped: bytes) -> bytes:
    """The member's data key; ``DecryptionFailed`` when the master key (or the member) is not the one it was
    wrapped with."""
    if wrapped[:1] != VALUE_VERSION or len(wrapped) < 1 + NONCE_BYTES + 16:
        raise DecryptionFailed(user_id, "member key")
    try:
        return AESGCM(master_key).decrypt(wrapped[1 : 1 + NONCE_BYTES], wrapped[1 + NONCE_BYTES :], _wrap_aad(user_id))
    except InvalidTag:
        raise DecryptionFailed(user_id, "member key") from None


VERIFIER_PLAINTEXT = b"memory-call key store"


def make_verifier(master_key: bytes) -> bytes:
    """A value only the right master key opens: the key store keeps one, so a wrong key is refused at start."""
    nonce = os.urandom(NONCE_BYTES)
    return VALUE_VERSION + nonce + AESGCM(master_key).encrypt(nonce, VERIFIER_PLAINTEXT, b"memory-call/verifier")


def verifier_opens(master_key: bytes, verifier: bytes) -> bool:
    try:
        return (
            AESGCM(master_key).decrypt(
                verifier[1 : 1 + NONCE_BYTES], verifier[1 + NONCE_BYTES :], b"memory-call/verifier"
            )
            == VERIFIER_PLAINTEXT
        )
    except (InvalidTag, ValueError):
        return False


def _derive(data_key: bytes, purpose: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=b"memory-call/" + purpose).derive(data_key)


class MemberCipher:
    """Encrypts and decrypts one member's values and hashes their search terms."""

    __slots__ = ("_aads", "_aead", "_term_key", "user_id")

    def __init__(self, user_id: int, data_key: bytes):
        if len(data_key) != KEY_BYTES:
            raise ValueError("a member data key is 32 bytes")
        self.user_id = int(user_id)
        self._aead = AESGCM(_derive(data_key, b"values"))
        self._term_key = _derive(data_key, b"terms")
        self._aads: dict[str, bytes] = {}

    def _aad(self, column: str) -> bytes:
        aad = self._aads.get(column)
        if aad is None:
            aad = self._aads[column] = f"memory-call/v1/{self.user_id}/{column}".encode()
        return aad

    def encrypt_bytes(self, column: str, plaintext: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return VALUE_VERSION + nonce + self._aead.encrypt(nonce, plaintext, self._aad(column))

    def decrypt_bytes(self, column: str, ciphertext: bytes) -> bytes:
        if ciphertext[:1] != VALUE_VERSION or len(ciphertext) < 1 + NONCE_BYTES + 16:
            raise DecryptionFailed(self.user_id, column)
        try:
            return self._aead.decrypt(ciphertext[1 : 1 + NONCE_BYTES], ciphertext[1 + NONCE_BYTES :], self._aad(column))
        except InvalidTag:
            raise DecryptionFailed(self.user_id, column) from None

    def encrypt(self, column: str, text: str) -> bytes:
        return self.encrypt_bytes(column, text.encode("utf-8"))

    def decrypt(self, column: str, ciphertext: bytes) -> str:
        return self.decrypt_bytes(column, ciphertext).decode("utf-8")

    def term_hash(self, term: str) -> str:
        """The keyed hash of one normalized, stemmed term, as an index token (lowercase hex)."""
        digest = hmac.new(self._term_key, term.encode("utf-8"), hashlib.sha256).digest()
        return digest[:TERM_HASH_BYTES].hex()


INBOX_AAD = b"memory-call/webhook-inbox"


class InboxSealer:
    """Seals what the bot keeps on disk before it is attributed to a member (raw Agora webhook deliveries, which
    can carry transcript lines) with keys derived from the master key: AES-256-GCM, a fresh nonce each. Files
    sealed under a master key that has since been rotated no longer open (``open`` raises ``ValueError``)."""

    __slots__ = ("_aead", "_name_key")

    def __init__(self, master_key: bytes):
        self._aead = AESGCM(_derive(master_key, b"webhook-inbox"))
        self._name_key = _derive(master_key, b"webhook-inbox-names")

    def name(self, data: bytes) -> str:
        """A stable file name for ``data`` that does not let anyone confirm a guess of its content."""
        return hmac.new(self._name_key, data, hashlib.sha256).hexdigest()

    def seal(self, data: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return VALUE_VERSION + nonce + self._aead.encrypt(nonce, data, INBOX_AAD)

    def open(self, sealed: bytes) -> bytes:
        if sealed[:1] != VALUE_VERSION or len(sealed) < 1 + NONCE_BYTES + 16:
            raise ValueError("not a sealed inbox file")
        try:
            return self._aead.decrypt(sealed[1 : 1 + NONCE_BYTES], sealed[1 + NONCE_BYTES :], INBOX_AAD)
        except InvalidTag:
            raise ValueError("a sealed inbox file did not open with this master key (rotated, or damaged)") from None
