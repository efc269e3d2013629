"""Password hashing: argon2id (argon2-cffi) in a worker thread behind a small limiter.

Parameters: the OWASP minimum for argon2id (19 MiB, 2 passes, 1 lane), about 70 ms per
hash on a 2-core machine, so a login costs one core that long and never the event loop. At
most `WORKERS` hashes run at once (one core fewer than the machine has, at least one; a
trio.CapacityLimiter per run), so a burst of logins queues for them while the event loop keeps
a core for the API (bench/login.py measures both).

`verify_dummy` does the same work against a fixed hash, so an unknown email costs what a
wrong password costs (no account enumeration by timing). `needs_rehash` tells a caller with
a just-verified password whether to store a fresh hash (parameters raised since).
"""

from __future__ import annotations

import os

import argon2
import trio
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

MIN_LENGTH = 12
COMMON = frozenset("""
123456789012 1234567890123 12345678901234 password1234 password12345 passwordpassword qwertyuiopas
qwertyuiop12 qwerty123456 1q2w3e4r5t6y iloveyou1234 abcdefghijkl abc123456789 111111111111 000000000000
aaaaaaaaaaaa letmein12345 welcome12345 administrator changeme1234 football1234 baseball1234 trustno11234
superman1234 monkey123456 dragon123456 sunshine1234 princess1234 123123123123 987654321098 passw0rd1234
""".split())
WORKERS = max(1, (os.cpu_count() or 2) - 1)  # one core stays with the event loop
HASHER = argon2.PasswordHasher(time_cost=2, memory_cost=19 * 1024, parallelism=1, hash_len=32, salt_len=16,
                               type=argon2.Type.ID)
_LIMITER: trio.lowlevel.RunVar = trio.lowlevel.RunVar("password_limiter")
_DUMMY: list[str] = []


def limiter() -> trio.CapacityLimiter:
    try:
        return _LIMITER.get()
    except LookupError:
        lim = trio.CapacityLimiter(WORKERS)
        _LIMITER.set(lim)
        return lim


async def hash_password(password: str) -> str:
    return await trio.to_thread.run_sync(HASHER.hash, password, limiter=limiter())


def _verify(stored: str, password: str) -> bool:
    try:
        return HASHER.verify(stored, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


async def verify(stored: str, password: str) -> bool:
    return await trio.to_thread.run_sync(_verify, stored, password, limiter=limiter())


async def verify_dummy(password: str) -> None:
    """The work of one verify, for an email nobody has."""
    if not _DUMMY:
        _DUMMY.append(await hash_password("not-a-password-anyone-has"))
    await verify(_DUMMY[0], password)


def weakness(password: str) -> str | None:
    """Why `password` is refused, or None: under 12 characters, or a common one."""
    if len(password) < MIN_LENGTH:
        return f"The password must be at least {MIN_LENGTH} characters long."
    if password.lower() in COMMON or len(set(password)) <= 2:
        return "This password is too common. Choose another one."
    return None


def needs_rehash(stored: str) -> bool:
    try:
        return HASHER.check_needs_rehash(stored)
    except InvalidHashError:
        return True
