"""The cipher of the Raft ports: AES-256-GCM under a key derived once per process from the cluster secret.

pysyncobj encrypts each message with Fernet: AES-128-CBC and HMAC-SHA256, base64, and a second HMAC check just to
read the timestamp. That costs about 30 µs per message here, and every replica derives its key with 100,000
PBKDF2 rounds (16 replicas per node at start). This class keeps pysyncobj's framing and its replay checks: a
random key per connection inside every message, and timestamps that must not go back. Only the cipher changes,
to about 2 µs per message (docs/PERFORMANCE.md).

    token = version (1 byte) | timestamp (8 bytes, big endian) | nonce (12 bytes) | ciphertext and tag

The version and the timestamp are authenticated as associated data. `extract_timestamp` reads the timestamp
without checking it; pysyncobj decrypts the same token right after and drops the connection (with the
timestamp it noted) if that fails. Nonces count up from a random 96-bit start per cipher, so one cipher never
repeats a nonce. Two ciphers under the same key would have to draw overlapping ranges out of 2^96.
"""

from __future__ import annotations

import functools
import itertools
import os
import struct

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

TOKEN_VERSION = 1
KDF_SALT = b"groupcoord raft aes-256-gcm v1"
KDF_ROUNDS = 100_000
_HEADER = struct.Struct(">BQ")
_NONCE_BYTES = 12
_NONCE_MASK = (1 << (8 * _NONCE_BYTES)) - 1
_TAG_BYTES = 16


@functools.cache
def _aead(secret: str) -> AESGCM:
    """One key per secret and process: PBKDF2 because the secret may be a passphrase."""
    kdf = PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=KDF_SALT, iterations=KDF_ROUNDS)
    return AESGCM(kdf.derive(secret.encode()))


class InvalidToken(ValueError):
    """Not a token of this cipher; pysyncobj drops the connection on any exception."""


class RaftCipher:
    """pysyncobj's encryptor interface (`encrypt_at_time`, `extract_timestamp`, `decrypt`) for one replica."""

    def __init__(self, secret: str) -> None:
        self._aead = _aead(secret)
        self._counter = itertools.count(int.from_bytes(os.urandom(_NONCE_BYTES), "big"))

    def encrypt_at_time(self, data: bytes, current_time: int) -> bytes:
        header = _HEADER.pack(TOKEN_VERSION, current_time)
        nonce = (next(self._counter) & _NONCE_MASK).to_bytes(_NONCE_BYTES, "big")
        return header + nonce + self._aead.encrypt(nonce, data, header)

    def extract_timestamp(self, token: bytes) -> int:
        return self._header(token)

    def decrypt(self, token: bytes) -> bytes:
        self._header(token)
        start = _HEADER.size + _NONCE_BYTES
        return self._aead.decrypt(token[_HEADER.size : start], token[start:], token[: _HEADER.size])

    @staticmethod
    def _header(token: bytes) -> int:
        if len(token) < _HEADER.size + _NONCE_BYTES + _TAG_BYTES:
            raise InvalidToken("token too short")
        timestamp: int
        version, timestamp = _HEADER.unpack_from(token)

        if version != TOKEN_VERSION:
            raise InvalidToken(f"token version {version}")
        return timestamp
