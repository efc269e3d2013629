"""Password hashing: argon2id (argon2-cffi) in a worker thread behind a small limiter.

Parameters: the OWASP minimum for argon2id (19 MiB, 2 passes, 1 lane), about 70 ms per
hash on a 2-core machine, so a login costs one core that long and never the event loop. At
most `WORKERS` hashes run at once (a trio.CapacityLimiter per run); further logins queue
for it while the API keeps answering (bench/login.py measures both).

`verify_dummy` does the same work against a fixed hash, so an unknown email costs what a
wrong password costs (no account enumeration by timing). `needs_rehash` tells a caller with
a just-verified password whether to store a fresh hash (parameters raised since).
"""

from __future__ import annotations

import argon2
import trio
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

WORKERS = 2
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


def needs_rehash(stored: str) -> bool:
    try:
        return HASHER.check_needs_rehash(stored)
    except InvalidHashError:
        return True
