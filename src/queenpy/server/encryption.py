"""At-rest encryption of payloads per queue (API.md section 14), with AES-256-GCM from ``cryptography``.

Stored shape, compatible with the original broker: ``{"encrypted": b64(ciphertext), "iv": b64(16 bytes),
"authTag": b64(16 bytes)}``. The original draws a 16-byte IV but OpenSSL uses only its first 12 bytes as
the GCM nonce, so we encrypt and decrypt with ``nonce = iv[:12]`` and no associated data.
"""

from __future__ import annotations

import base64
import os
from typing import Any

import orjson
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from queenpy.errors import ConfigurationError

__all__ = ["PayloadCipher"]

_TAG_BYTES = 16


class PayloadCipher:
    """Encrypts and decrypts payloads with one 32-byte key given as 64 hex characters.

    Raises:
        ConfigurationError: the key is not 64 hex characters.
    """

    def __init__(self, key_hex: str) -> None:
        try:
            key = bytes.fromhex(key_hex)
        except ValueError as exc:
            raise ConfigurationError("QUEEN_ENCRYPTION_KEY must be 64 hex characters") from exc
        if len(key) != 32:
            raise ConfigurationError("QUEEN_ENCRYPTION_KEY must be 64 hex characters (32 bytes)")
        self._aead = AESGCM(key)

    def encrypt(self, payload: Any) -> dict[str, str]:
        """Payload (any JSON value) -> the stored ciphertext object."""
        iv = os.urandom(16)
        sealed = self._aead.encrypt(iv[:12], orjson.dumps(payload), None)
        ciphertext, tag = sealed[:-_TAG_BYTES], sealed[-_TAG_BYTES:]
        return {
            "encrypted": base64.b64encode(ciphertext).decode(),
            "iv": base64.b64encode(iv).decode(),
            "authTag": base64.b64encode(tag).decode(),
        }

    @staticmethod
    def looks_encrypted(value: Any) -> bool:
        return (
            isinstance(value, dict)
            and isinstance(value.get("encrypted"), str)
            and isinstance(value.get("iv"), str)
            and isinstance(value.get("authTag"), str)
        )

    def decrypt(self, value: Any) -> Any:
        """The stored object -> the payload; anything that does not decrypt is returned unchanged."""
        if not self.looks_encrypted(value):
            return value
        try:
            iv = base64.b64decode(value["iv"])
            sealed = base64.b64decode(value["encrypted"]) + base64.b64decode(value["authTag"])
            return orjson.loads(self._aead.decrypt(iv[:12], sealed, None))
        except Exception:  # noqa: BLE001 - API.md 14: failure leaves the value as is
            return value
