"""The media check (service.media.inspect) in worker processes, not in the node's own.

Every file the node stores is decoded once first: an upload (its header probed for its size
first, `pixels`), and an engine's output. Done here in a worker process (trio-parallel), for
two reasons:

- A decoder's fault on a crafted file (a crash in Pillow's or FFmpeg's C code, memory it
  cannot get, a loop that never ends: CHECK_S) ends that worker, not the node with every
  job and stream it holds, and holds no thread for ever. The file gets its kind's "not
  readable" answer, as for any decoder complaint, and the next check starts a new worker.
  A worker that cannot be had (no process, or one that exits by itself, not by a signal)
  says nothing of the file: 503, retry later.
  This is containment of faults, not a sandbox: the workers run as the node's user and
  can read what it can.
- The check's own Python (Pillow's open and its plugins, PyAV's probing) held the GIL in a
  worker thread while the event loop's thread waited for it (bench/README.md,
  "Throughput XXII").

At most one check per core runs at once (trio-parallel's default limiter), so there are at
most that many workers (about 50 MB each when idle); the other checks wait their turn, and
each waiter is an upload or a job, both bounded. A worker idle for IDLE_S ends; a worker
that has just decoded a large file (over LARGE_DECODE pixels) ends after it, so the
hundreds of megabytes it touched go back to the system. `serve` scopes the
workers to the node's run (`workers`); anything else (the tests' nodes) uses the
process-wide default, ended at exit.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from pathlib import Path
from typing import Any

import trio_parallel

from service import threads
from service.assets.files import hash_bytes
from service.errors import Unavailable, Unprocessable

from .gate import LARGE_DECODE
from .images import read_head
from .inspect import (
    MSG_NOT_AUDIO,
    MSG_NOT_IMAGE,
    MSG_NOT_VIDEO,
    MediaInfo,
    decode_pixels,
    inspect_file,
)
from .sniff import sniff

log = logging.getLogger("service.media")

IDLE_S = 600.0  # an idle worker ends after this
# A check still running after this many seconds (a decoder looping on a crafted file) ends
# its worker (SIGALRM, real time, whatever the caller's clock): the file is refused as one
# the worker died on. A 40-megapixel decode takes a second or two.
CHECK_S = 60
# Data up to this size goes to the worker with the call, which writes it (one hop); larger
# data is written by a thread first, since the pipe would copy it on the event loop's thread.
IN_CALL_BYTES = 256 * 1024
MSG_NO_CHECK = "The file could not be checked now (the node could not start its media check); retry later."

_large = False  # in a worker: its last check decoded a large file (read by `_retire`)


def workers() -> AbstractAsyncContextManager[None]:
    """The check's workers for the block's run; ended with it (`serve`)."""
    return trio_parallel.cache_scope(idle_timeout=IDLE_S, retire=_retire)


async def check_file(path: str | Path, declared_type: str | None) -> MediaInfo:
    """`inspect_file(path, declared_type)` in a worker; raises Unprocessable as it does,
    and when the worker dies on the file."""
    return _answer(await _in_worker(path, declared_type, _check, str(path), declared_type))


async def pixels(path: str | Path) -> int:
    """`decode_pixels(path)` in a worker: a video's header is probed by FFmpeg, whose fault
    on a crafted file must not end the node either. Unprocessable when the worker dies."""
    return await _in_worker(path, None, _pixels, str(path))


async def write_and_check(path: Path, data: bytes) -> tuple[tuple[str, int], MediaInfo]:
    """Write `data` at `path` (its folder made), check it as a file of no declared type,
    and give (its digest and size, what it is). A file refused, or whose check killed its
    worker, is removed again; Unprocessable says why."""
    try:
        if len(data) <= IN_CALL_BYTES:
            digest, answer = await _in_worker(path, None, _write_then_check, str(path), data)
        else:
            digest = await threads.run_sync(_write, path, data)
            answer = await _in_worker(path, None, _check, str(path), None)
        return digest, _answer(answer)
    except Unprocessable:
        await threads.run_sync(_remove, path)
        raise


async def warm() -> None:
    """Start a worker before the first check needs one (a start costs about a second);
    a cancel (the node stopping) kills it. One that cannot start is logged, not raised: this
    runs in the node's actors nursery, and each check tries a worker of its own."""
    try:
        await trio_parallel.run_sync(int, kill_on_cancel=True)
    except trio_parallel.BrokenWorkerError as e:
        log.error("the media check's first worker did not start (%s)", _exit_of(e))
    except OSError as e:  # no process or pipe to be had (process or descriptor limits)
        log.error("the media check's first worker did not start (%s)", e)


async def _in_worker(path: str | Path, declared_type: str | None, fn: Any, *args: Any) -> Any:
    """`fn(*args)` in a worker, a free token taken without a step; Unprocessable (the file's
    kind's "not readable") when the worker dies on it."""
    try:
        return await trio_parallel.run_sync(fn, *args, limiter=threads.prompt(
            trio_parallel.current_default_worker_limiter()))
    except OSError as e:  # no process or pipe to be had (or no disk): the node's fault, not the file's
        log.error("the media check could not run (%s): the file is not checked", e)
        raise Unavailable(MSG_NO_CHECK) from None
    except trio_parallel.BrokenWorkerError as e:
        if not _signalled(e):  # it exited by itself (e.g. at its start): not the file's doing
            log.error("the media check's worker ended by itself (%s): the file is not checked", _exit_of(e))
            raise Unavailable(MSG_NO_CHECK) from None
        log.warning("the media check's worker ended while checking a file (%s): the file is refused",
                    _exit_of(e))
        raise Unprocessable(await threads.run_sync(_broken_message, path, declared_type)) from None


def _answer(answer: tuple) -> MediaInfo:
    if answer[0] == "ok":
        return answer[1]
    raise Unprocessable(answer[1], answer[2])


def _exit_code(e: trio_parallel.BrokenWorkerError) -> int | None:
    return getattr(e.args[1] if len(e.args) > 1 else None, "exitcode", None)


def _signalled(e: trio_parallel.BrokenWorkerError) -> bool:
    """Whether a signal ended the worker: a decoder's crash (SIGSEGV, SIGABRT), the memory
    it took (the OOM killer's SIGKILL), or CHECK_S (SIGALRM). An exit code is Python's own
    end (its start or imports failing); an unknown end counts as the file's, as before."""
    code = _exit_code(e)
    return code is None or code < 0


def _exit_of(e: trio_parallel.BrokenWorkerError) -> str:
    code = _exit_code(e)
    if code is None:
        return "its end unknown"
    return f"signal {-code}" if code < 0 else f"exit code {code}"


def _broken_message(path: str | Path, declared_type: str | None) -> str:
    """The answer for a file the check died on: its kind's "not readable" message, by its
    bytes (else by its declared type, as inspect_file chooses)."""
    try:
        kind = sniff(read_head(path))
    except OSError:
        kind = None
    kind = kind or (declared_type or "").strip().lower()
    if kind.startswith("video/"):
        return MSG_NOT_VIDEO
    if kind.startswith("audio/"):
        return MSG_NOT_AUDIO
    return MSG_NOT_IMAGE


# -- in the worker ---------------------------------------------------------------------------
def _check(path: str, declared_type: str | None) -> tuple:
    """("ok", MediaInfo) or ("no", message, details): plain values, since an exception's
    pickle would drop its details."""
    global _large
    try:
        with _bounded():
            info = inspect_file(path, declared_type)
    except Unprocessable as e:
        _large = False
        return ("no", e.message, e.details)
    _large = (info.width or 0) * (info.height or 0) > LARGE_DECODE
    return ("ok", info)


def _pixels(path: str) -> int:
    with _bounded():
        return decode_pixels(path)


@contextmanager
def _bounded() -> Iterator[None]:
    """The block ends its worker (SIGALRM's default) once it has run CHECK_S seconds."""
    signal.alarm(CHECK_S)
    try:
        yield
    finally:
        signal.alarm(0)


def _write_then_check(path: str, data: bytes) -> tuple[tuple[str, int], tuple]:
    return _write(Path(path), data), _check(path, None)


def _write(path: Path, data: bytes) -> tuple[str, int]:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return hash_bytes(data)


def _remove(path: str | Path) -> None:
    Path(path).unlink(missing_ok=True)


def _retire() -> bool:
    return _large
