"""The Raft ports' cipher (raft/cipher.py): what pysyncobj's transport relies on."""

from __future__ import annotations

import pytest
from cryptography.exceptions import InvalidTag

from groupcoord.raft.cipher import InvalidToken, RaftCipher

SECRET = "test-cluster-secret"


def test_a_token_decrypts_under_the_same_secret_in_another_cipher():
    token = RaftCipher(SECRET).encrypt_at_time(b"append_entries", 1234)
    other = RaftCipher(SECRET)
    assert other.extract_timestamp(token) == 1234
    assert other.decrypt(token) == b"append_entries"
    assert b"append_entries" not in token


def test_another_secret_cannot_decrypt():
    token = RaftCipher(SECRET).encrypt_at_time(b"vote for me", 7)
    with pytest.raises(InvalidTag):
        RaftCipher("not-the-secret").decrypt(token)


@pytest.mark.parametrize("position", [0, 1, 8, 9, 20, 21, -1])
def test_every_changed_byte_is_refused(position: int):
    """The version and timestamp are authenticated too: a token cannot be replayed under a later timestamp."""
    cipher = RaftCipher(SECRET)
    token = bytearray(cipher.encrypt_at_time(b"commit index 9", 5))
    token[position] ^= 0x01
    with pytest.raises((InvalidTag, InvalidToken)):
        cipher.decrypt(bytes(token))


@pytest.mark.parametrize("token", [b"", b"\x01" * 36, b"gAAAAABfernet-token-of-the-old-format" * 2])
def test_what_is_not_a_token_is_refused(token: bytes):
    with pytest.raises((InvalidTag, InvalidToken)):
        RaftCipher(SECRET).decrypt(token)


def test_no_nonce_repeats_in_one_cipher():
    cipher = RaftCipher(SECRET)
    nonces = {cipher.encrypt_at_time(b"x", 1)[9:21] for _ in range(10_000)}
    assert len(nonces) == 10_000
