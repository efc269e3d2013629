"""Backups of a node's data directory, taken while it runs, and restores into an empty one.

    genservice admin backup DEST     # on the node's machine, with the node's settings
    genservice admin restore SRC     # into an empty GENSERVICE_DATA_DIR, node stopped

A backup is a directory: `genservice.db`, a consistent copy made with SQLite's online backup
API (the node keeps writing; the copy is one point in time), the content files that copy
references (they are written before the rows that name them commit, and never change, so
every one is there), the asset-link secret (signed links and feed cursors stay valid), and
`backup.json` (when, how many files, each file's SHA-256 is its name). The node key is NOT
copied: a backup alone reveals no secret. Keep the node key apart (GENSERVICE_NODE_KEY_FILE);
restoring without it leaves webhook signing secrets unreadable (recreate those webhooks).

Everything a backup or a restore writes is the node user's alone: directories 0700, files
0600 (a backup holds every secret the database does; probe L10 found them 0644).

A restore checks the manifest, the database (`PRAGMA integrity_check`) and every content file
against its digest, then copies into a hidden sibling directory renamed over the (absent or
empty) data directory at the end: a restore that fails half-way leaves it as it was.

The database is copied in one step of the backup API. Copied in slices, every commit the node
made between two slices restarted the copy from the first page: a busy node's backup could
run forever. One step reads one snapshot (WAL: the node keeps writing meanwhile).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from service.assets.files import FileStore, hash_file
from service.assets.signing import SECRET_FILE
from service.storage.rows import Row

DB_NAME = "genservice.db"
MANIFEST = "backup.json"


class BackupError(Exception):
    """A backup or restore that cannot go on; the message says why, in one line."""


@contextmanager
def private(root: Path) -> Iterator[None]:
    """Write under `root` with umask 077, then make every directory 0700 and file 0600 (a
    copy keeps its source's mode, and an empty directory it was given keeps its own)."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)
        if root.is_dir():
            os.chmod(root, 0o700)
            for base, dirs, files in os.walk(root):
                for d in dirs:
                    os.chmod(os.path.join(base, d), 0o700)
                for f in files:
                    os.chmod(os.path.join(base, f), 0o600)


def backup(data_dir: Path, dest: Path, asset_store: str = "file") -> Row:
    """Back `data_dir` up into `dest`. With an object store (`asset_store` s3://...) the
    asset bytes are not under DATA_DIR and not copied: the manifest says so, and the
    store is backed up (or versioned) on its own."""
    data_dir, dest = Path(data_dir), Path(dest)
    source_db = data_dir / DB_NAME
    if not source_db.exists():
        raise BackupError(f"no database at {source_db}: is GENSERVICE_DATA_DIR the node's?")
    if not _absent_or_empty(dest):
        raise BackupError(f"{dest} is not empty: back up into a new directory")
    try:
        with private(dest):
            return _backup(data_dir, dest, asset_store)
    except sqlite3.Error as e:
        raise BackupError(f"cannot copy {source_db}: {e}") from None
    except OSError as e:
        raise BackupError(f"cannot write the backup into {dest}: {e.strerror or e}") from None


def _backup(data_dir: Path, dest: Path, asset_store: str) -> Row:
    source_db = data_dir / DB_NAME
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)
    started = time.monotonic()
    src = sqlite3.connect(f"file:{source_db}?mode=ro", uri=True)
    out = sqlite3.connect(dest / DB_NAME)
    try:
        src.backup(out)  # one step, one snapshot (module docstring)
        out.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        shas = [r[0] for r in out.execute("SELECT DISTINCT sha256 FROM assets")]
    finally:
        src.close()
        out.close()
    if asset_store != "file":
        if (data_dir / SECRET_FILE).exists():
            shutil.copy2(data_dir / SECRET_FILE, dest / SECRET_FILE)
        manifest = {"made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "files": 0,
                    "missing_files": [], "seconds": round(time.monotonic() - started, 3),
                    "assets": f"not included: the {len(shas)} asset contents are objects in {asset_store}; "
                              "back that store up on its own"}
        (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        return manifest
    files_in, files_out = FileStore(data_dir), FileStore(dest)
    missing = []
    for sha in shas:
        target = files_out.path(sha)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(files_in.path(sha), target)
        except FileNotFoundError:
            missing.append(sha)
    if (data_dir / SECRET_FILE).exists():
        shutil.copy2(data_dir / SECRET_FILE, dest / SECRET_FILE)
    manifest = {"made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "files": len(shas) - len(missing),
                "missing_files": missing, "seconds": round(time.monotonic() - started, 3)}
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if missing:
        raise BackupError(f"{len(missing)} content files named by the database are missing from {data_dir}")
    return manifest


def _absent_or_empty(path: Path) -> bool:
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


def _check(src: Path) -> list[str]:
    """The content digests a backup's database names, once the manifest and database are sound."""
    try:
        manifest = json.loads((src / MANIFEST).read_text())
    except (ValueError, UnicodeDecodeError):
        raise BackupError(f"{src / MANIFEST} is damaged: not JSON") from None
    try:
        conn = sqlite3.connect(f"file:{src / DB_NAME}?mode=ro", uri=True)
        try:
            if conn.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("integrity check")
            shas = [r[0] for r in conn.execute("SELECT DISTINCT sha256 FROM assets")]
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        raise BackupError(f"{src / DB_NAME} is damaged or truncated: not a usable SQLite database") from None
    if isinstance(manifest, dict) and "assets" in manifest:
        return []  # a backup of a node with an object store: the bytes stay in the store
    files = FileStore(src)
    for sha in shas:
        path = files.path(sha)
        if not path.exists() or hash_file(path)[0] != sha:
            raise BackupError(f"content file {sha} is missing or altered in {src}")
    return shas


def restore(src: Path, data_dir: Path) -> Row:
    src, data_dir = Path(src), Path(data_dir)
    if not (src / MANIFEST).exists() or not (src / DB_NAME).exists():
        raise BackupError(f"{src} is not a backup (no {MANIFEST} or {DB_NAME})")
    if not _absent_or_empty(data_dir):
        raise BackupError(f"{data_dir} is not empty: restore into an empty data directory")
    shas = _check(src)
    started = time.monotonic()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = data_dir.parent / f".{data_dir.name}.restoring-{os.getpid()}"
    try:
        with private(staging):
            _copy(src, staging)
        os.replace(staging, data_dir)  # onto an absent or empty directory: all or nothing
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise BackupError(f"cannot restore into {data_dir}: {e.strerror or e}") from None
    return {"files": len(shas), "seconds": round(time.monotonic() - started, 3)}


def _copy(src: Path, staging: Path) -> None:
    staging.mkdir(mode=0o700)
    shutil.copy2(src / DB_NAME, staging / DB_NAME)
    if (src / SECRET_FILE).exists():
        shutil.copy2(src / SECRET_FILE, staging / SECRET_FILE)
    if (src / "assets").exists():
        shutil.copytree(src / "assets", staging / "assets", dirs_exist_ok=True)
