"""Content-addressed asset files under `DATA_DIR/assets/`.

    assets/ab/cd/<sha256>      the bytes of every asset whose digest is <sha256> (shared)
    assets/tmp/<id>.part       an upload being received (named by its future asset id)
    work/<job_id>/             a render's scratch directory (outputs before placement)

A file is placed with `place(src, sha)`: fsync, then an atomic rename into its digest's
path (when that path already holds the same bytes the source is just dropped), then an
fsync of the directory. A placed file is never rewritten or deleted, so a reader that
found an asset row always finds its bytes.

Methods take the row's `scope` (service/assets/scopes.py) for an object store's sake; local
files ignore it: they are one per content for the node, and never served with their own
times (service/http/routes/files.py sends the asset's), so sharing them tells no one anything.

Every method here blocks (hashing, fsync): call them through `trio.to_thread.run_sync`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

log = logging.getLogger(__name__)

CHUNK = 1024 * 1024


class StoreUnavailable(Exception):
    """The asset store could not be reached or refused a request."""


class ObjectMissing(Exception):
    """An asset row names bytes the store no longer has (deleted behind the node's back)."""


def hash_bytes(data: bytes) -> tuple[str, int]:
    """SHA-256 hex digest and size of bytes in memory (as `hash_file` gives for a file of them)."""
    return hashlib.sha256(data).hexdigest(), len(data)


def hash_file(path: str | Path) -> tuple[str, int]:
    """SHA-256 hex digest and size of the file."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class FileStore:
    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir)
        self.root = self.data_dir / "assets"
        self.tmp = self.root / "tmp"
        self.work = self.data_dir / "work"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256[2:4] / sha256

    def exists(self, sha256: str, scope: str | None = None) -> bool:
        return self.path(sha256).is_file()

    def local(self, sha256: str, into: Path | None = None, scope: str | None = None) -> Path:
        """A local path of the bytes, for a render or an op (files are local: `into` unused)."""
        path = self.path(sha256)
        if not path.is_file():
            raise ObjectMissing(sha256)
        return path

    def read_bytes(self, sha256: str, limit: int, scope: str | None = None) -> bytes:
        """The first `limit` bytes of the content, read where they are: nothing is copied to
        disk (an object store's copy in scratch was the callers' own cleanup to get right)."""
        try:
            with open(self.path(sha256), "rb") as f:
                return f.read(limit)
        except FileNotFoundError:
            raise ObjectMissing(sha256) from None

    @contextmanager
    def fetched(self, sha256: str, scope: str | None = None) -> Iterator[Path]:
        """A local path of the bytes for a reader that needs a file (a video's decoder), in
        scratch of its own that goes when the block ends (for local files: the file itself)."""
        scratch = f"fetch-{uuid.uuid4()}"
        try:
            yield self.local(sha256, self.work_dir(scratch), scope)
        finally:
            self.discard_work(scratch)

    def input_path(self, sha256: str, job_id: str, scope: str | None = None) -> Path:
        """Where a render reads an input (no I/O beyond a stat); `fetch_inputs` makes it exist."""
        return self.local(sha256)

    def fetch_inputs(self, paths: list[Path]) -> None:
        """Before a render: make every input path exist (local files already do)."""

    def check(self) -> None:
        """At start: the files are local, nothing to reach."""

    def remove_unreferenced(self, referenced: set[str]) -> int:
        """Delete content files no asset row names: left by a stop between placing a file
        and committing its row. Run at start, before anything writes files."""
        removed = 0
        for path in self.root.glob("??/??/*"):
            if path.is_file() and path.name not in referenced:
                path.unlink()
                removed += 1
        return removed

    def upload_temp(self, asset_id: str) -> Path:
        return self.tmp / f"{asset_id}.part"

    def work_dir(self, job_id: str) -> Path:
        return self.work / job_id

    def place(self, src: str | Path, sha256: str, scope: str | None = None) -> Path:
        """Move `src` (whose digest is `sha256`) into the store; returns the stored path."""
        src = Path(src)
        dst = self.path(sha256)
        if dst.is_file():
            src.unlink(missing_ok=True)
            return dst
        with open(src, "rb") as f:
            os.fsync(f.fileno())
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(src, 0o644)
        os.replace(src, dst)
        _fsync_dir(dst.parent)
        return dst

    def discard_work(self, job_id: str) -> None:
        """The job's scratch directory away. Its outputs were placed, so it is mostly empty:
        one `rmdir` then, where a tree walk cost the worker thread (and the GIL) far more."""
        path = self.work_dir(job_id)
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError:  # not empty (an engine's other scratch files), or not a directory
            shutil.rmtree(path, ignore_errors=True)

    def clear_work(self) -> None:
        """At start: no render survives a restart, so every scratch directory is stale."""
        for child in self.work.iterdir():
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)

    def recover_uploads(self, asset_sha: Callable[[str], str | None]) -> tuple[int, int]:
        """Finish or drop uploads a stop interrupted. `asset_sha(asset_id)` is the committed
        row's digest or None. A committed upload whose file was not yet moved is placed
        (if its bytes match); anything else in tmp/ is deleted. Returns (placed, dropped)."""
        placed = dropped = 0
        for part in self.tmp.iterdir():
            asset_id = part.name.removesuffix(".part")
            sha = asset_sha(asset_id) if part.name.endswith(".part") else None
            if sha is not None and not self.exists(sha) and hash_file(part)[0] == sha:
                self.place(part, sha)
                placed += 1
                continue
            part.unlink(missing_ok=True)
            dropped += 1
        return placed, dropped
