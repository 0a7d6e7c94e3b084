"""Secrets at rest: Fernet (AES-128-CBC + HMAC-SHA256) with key rotation through MultiFernet.

The key comes from ``FACTORY_SECRET_KEY`` (read at the CLI edge; comma-separated keys, the first
one encrypts, all of them decrypt) or from a 0600 key file in the data directory, created on
first use. Losing the key loses every stored secret value: back it up (docs/operations.md).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from store import SecretKeyError

KEY_FILE_NAME = "secret.key"


class SecretBox:
    def __init__(self, keys: list[bytes]) -> None:
        if not keys:
            raise SecretKeyError("no secret key configured")
        try:
            self._fernet = MultiFernet([Fernet(k) for k in keys])
        except (ValueError, TypeError) as exc:
            raise SecretKeyError(
                "the secret key is not a valid Fernet key (32 url-safe base64 bytes)"
            ) from exc

    @classmethod
    def from_setting(cls, setting: str) -> SecretBox:
        return cls([k.strip().encode() for k in setting.split(",") if k.strip()])

    def encrypt(self, value: str) -> bytes:
        return self._fernet.encrypt(value.encode("utf-8"))

    def decrypt(self, token: bytes) -> str:
        try:
            return self._fernet.decrypt(token).decode("utf-8")
        except InvalidToken as exc:
            raise SecretKeyError("a stored secret cannot be decrypted with the configured key") from exc


def load_or_create_key_file(data_dir: Path) -> str:
    """Return the key in ``<data_dir>/secret.key``, creating it (mode 0600) when absent."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / KEY_FILE_NAME
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise SecretKeyError(f"{path} is readable by others (mode {mode:o}); chmod 600 it") from None
        return path.read_text().strip()
    with os.fdopen(fd, "w") as fh:
        fh.write(Fernet.generate_key().decode())
    return path.read_text().strip()
