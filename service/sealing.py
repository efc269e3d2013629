"""The node key: secrets the node must read back (webhook signing secrets, and any engine
token ever stored) are kept sealed with it, so a copy of the database alone reveals none.

The key is 32 random bytes in a file outside the database (`DATA_DIR/node-key` by default,
`GENSERVICE_NODE_KEY_FILE` to keep it elsewhere, for example out of the backups), created
on first start with mode 0600. Sealed text is `v1:<key id>:<base64 of nonce + AES-GCM
ciphertext>`; the key id (8 hex digits of the key's SHA-256) says which key opens it.

Rotation (`genservice admin rotate-node-key`) writes the new key beside the old one
(`node-key.next`), re-seals every stored secret with it in one transaction, then moves it
over the old file. A stop in between is safe: at start both files are read, every sealed
text names its key, and a pending `.next` file is finished (made the key) when the database
already uses it, or dropped when it does not.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PREFIX = "v1:"


class SealError(ValueError):
    """A sealed text this node cannot open (unknown key, or altered)."""


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


def _write_new(path: Path, key: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(base64.b64encode(key) + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.chmod(path, 0o600)


def _read(path: Path) -> bytes:
    if path.stat().st_mode & 0o077:  # left readable by a copy or an editor: the node user's alone
        os.chmod(path, 0o600)
    try:  # the message never carries the file's content
        key = base64.b64decode(path.read_bytes().strip(), validate=True)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise ValueError(f"{path} is not a node key (32 bytes in base64)")
    return key


def check_key_file(path: Path) -> None:
    """Start-up check: an existing key file must be a key (a new one is made on first start)."""
    if path.exists():
        _read(path)


class NodeKey:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.next_path = self.path.with_name(self.path.name + ".next")
        if not self.path.exists():
            _write_new(self.path, secrets.token_bytes(32))
        self.current = _read(self.path)
        self.keys = {key_id(self.current): self.current}
        if self.next_path.exists():  # a rotation stopped half-way: both open until `settle`
            pending = _read(self.next_path)
            self.keys[key_id(pending)] = pending

    @property
    def current_id(self) -> str:
        return key_id(self.current)

    def seal(self, text: str) -> str:
        nonce = secrets.token_bytes(12)
        sealed = AESGCM(self.current).encrypt(nonce, text.encode("utf-8"), self.current_id.encode())
        return f"{PREFIX}{self.current_id}:{base64.b64encode(nonce + sealed).decode()}"

    def open(self, sealed: str) -> str:
        try:
            kid, blob = sealed.removeprefix(PREFIX).split(":", 1)
            raw = base64.b64decode(blob, validate=True)
            return AESGCM(self.keys[kid]).decrypt(raw[:12], raw[12:], kid.encode()).decode("utf-8")
        except Exception as e:  # noqa: BLE001 - never say more than "cannot open"
            raise SealError("a sealed secret this node key cannot open") from e

    @staticmethod
    def is_sealed(text: str) -> bool:
        return text.startswith(PREFIX)

    # rotation --------------------------------------------------------------------------------
    def begin_rotation(self) -> bytes:
        """A new key, written beside the current one (it can open what gets sealed with it
        before the switch)."""
        new = secrets.token_bytes(32)
        _write_new(self.next_path, new)
        self.keys[key_id(new)] = new
        return new

    def finish_rotation(self, new: bytes) -> None:
        """Every stored secret is sealed with `new` (committed): it becomes the key."""
        os.replace(self.next_path, self.path)
        self.current = new
        self.keys = {key_id(new): new}

    def settle(self, used_ids: set[str]) -> None:
        """At start, after reading which key ids the database uses: finish or drop a rotation
        that stopped half-way."""
        if not self.next_path.exists():
            return
        pending = _read(self.next_path)
        if key_id(pending) in used_ids:
            self.finish_rotation(pending)
        else:
            self.next_path.unlink()
            self.keys = {key_id(self.current): self.current}

    def resealer(self, new: bytes):
        """`old sealed text -> the same secret sealed with `new``, for a rotation."""
        kid = key_id(new)

        def reseal(sealed: str) -> str:
            text = self.open(sealed)
            nonce = secrets.token_bytes(12)
            blob = AESGCM(new).encrypt(nonce, text.encode("utf-8"), kid.encode())
            return f"{PREFIX}{kid}:{base64.b64encode(nonce + blob).decode()}"

        return reseal
