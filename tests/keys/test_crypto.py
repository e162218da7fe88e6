"""Per-value encryption, key wrapping and keyed term hashes (bot/keys/crypto.py)."""

from __future__ import annotations

import base64

import pytest

from bot.keys.crypto import (
    DecryptionFailed,
    InvalidMasterKey,
    MemberCipher,
    generate_master_key_text,
    make_verifier,
    new_data_key,
    parse_master_key,
    unwrap_data_key,
    verifier_opens,
    wrap_data_key,
)

MARKER = "my locker code is Zebra-4471"


def test_a_value_round_trips_and_is_not_readable_in_its_ciphertext() -> None:
    cipher = MemberCipher(1, new_data_key())
    blob = cipher.encrypt("turns.content", MARKER)
    assert cipher.decrypt("turns.content", blob) == MARKER
    assert MARKER.encode() not in blob and b"Zebra" not in blob


def test_every_encryption_uses_a_fresh_nonce() -> None:
    cipher = MemberCipher(1, new_data_key())
    blobs = {cipher.encrypt("facts.text", MARKER) for _ in range(50)}
    assert len(blobs) == 50
    assert len({blob[1:13] for blob in blobs}) == 50


def test_a_ciphertext_moved_to_another_members_row_fails_clearly() -> None:
    key = new_data_key()
    # Even with the very same data key, the member ID is bound in: the value cannot be moved between members.
    alice, mallory = MemberCipher(1, key), MemberCipher(2, key)
    blob = alice.encrypt("turns.content", MARKER)
    with pytest.raises(DecryptionFailed) as caught:
        mallory.decrypt("turns.content", blob)
    assert caught.value.user_id == 2 and caught.value.column == "turns.content"
    assert "belongs to another member or column" in str(caught.value)
    assert MARKER not in str(caught.value)
    with pytest.raises(DecryptionFailed):
        MemberCipher(2, new_data_key()).decrypt("turns.content", blob)


def test_a_ciphertext_moved_to_another_column_fails_clearly() -> None:
    cipher = MemberCipher(1, new_data_key())
    blob = cipher.encrypt("facts.text", MARKER)
    with pytest.raises(DecryptionFailed, match=r"summaries\.summary"):
        cipher.decrypt("summaries.summary", blob)


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "version"])
def test_a_damaged_value_fails_instead_of_giving_garbage(damage: str) -> None:
    cipher = MemberCipher(1, new_data_key())
    blob = bytearray(cipher.encrypt("turns.content", MARKER))
    if damage == "flip":
        blob[20] ^= 1
    elif damage == "truncate":
        del blob[-1]
    elif damage == "empty":
        blob = bytearray()
    else:
        blob[0] = 2
    with pytest.raises(DecryptionFailed):
        cipher.decrypt("turns.content", bytes(blob))


def test_a_wrapped_key_opens_only_with_its_master_key_and_member() -> None:
    master, other = parse_master_key(generate_master_key_text()), parse_master_key(generate_master_key_text())
    key = new_data_key()
    wrapped = wrap_data_key(master, 7, key)
    assert key not in wrapped
    assert unwrap_data_key(master, 7, wrapped) == key
    with pytest.raises(DecryptionFailed):
        unwrap_data_key(other, 7, wrapped)
    with pytest.raises(DecryptionFailed):
        unwrap_data_key(master, 8, wrapped)


def test_the_verifier_tells_the_right_master_key_from_a_wrong_one() -> None:
    master, other = parse_master_key(generate_master_key_text()), parse_master_key(generate_master_key_text())
    verifier = make_verifier(master)
    assert verifier_opens(master, verifier)
    assert not verifier_opens(other, verifier)


def test_generated_master_keys_parse_and_differ() -> None:
    texts = {generate_master_key_text() for _ in range(10)}
    assert len(texts) == 10
    for text in texts:
        assert len(parse_master_key(text)) == 32
        assert len(parse_master_key(text.rstrip("="))) == 32  # padding is optional


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not base64 at all!!",
        base64.urlsafe_b64encode(b"short").decode(),
        base64.urlsafe_b64encode(bytes(33)).decode(),
    ],
)
def test_a_bad_master_key_is_refused_without_echoing_it(text: str) -> None:
    with pytest.raises(InvalidMasterKey) as caught:
        parse_master_key(text)
    assert "MEMORY_MASTER_KEY" in str(caught.value) and "keygen" in str(caught.value)
    if text:
        assert text not in str(caught.value)


def test_term_hashes_are_stable_per_member_and_differ_between_members() -> None:
    key = new_data_key()
    alice, alice_again, bob = MemberCipher(1, key), MemberCipher(1, key), MemberCipher(2, new_data_key())
    assert alice.term_hash("zebra") == alice_again.term_hash("zebra")
    assert alice.term_hash("zebra") != bob.term_hash("zebra")
    assert alice.term_hash("zebra") != alice.term_hash("zebras")
    token = alice.term_hash("zebra")
    assert len(token) == 20 and all(c in "0123456789abcdef" for c in token)
    assert "zebra" not in token
