"""A `genservice serve` subprocess for the reliability harness (reliability.md §6.1).

The node runs in test mode on 127.0.0.1 port 0 (a new port after every restart) with its
data in a directory that outlives it, in its own session (`start_new_session=True`) so a
kill takes the whole process group with SIGKILL. Its log goes to `DATA_DIR/serve-N.log`
(N counts the starts), which is kept for a failed run.

    node = Node(data_dir, env={...})
    node.start()                 # waits for "listening on"; node.url, node.op (headers)
    node.kill()                  # os.killpg(..., SIGKILL); returns the exit status
    node.wait_exit(10)           # for a crash point: the status it died with (137)
    node.stop()                  # SIGTERM, then SIGKILL after 20 s
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

OPERATOR_TOKEN = "reliability-operator-token"
LISTENING = re.compile(r"genservice listening on (http://\S+)")


class StartFailed(RuntimeError):
    pass


class Node:
    def __init__(self, data_dir: str | Path, env: dict | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.starts = 0
        self.log_path: Path | None = None

    @property
    def op(self) -> dict:
        return {"Authorization": f"Bearer {OPERATOR_TOKEN}"}

    @property
    def db_path(self) -> Path:
        return self.data_dir / "genservice.db"

    def start(self, crashpoint: str | None = None, timeout: float = 60.0) -> str:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("GENSERVICE_")}
        env.update({
            "GENSERVICE_HOST": "127.0.0.1", "GENSERVICE_PORT": "0", "GENSERVICE_DATA_DIR": str(self.data_dir),
            "GENSERVICE_TEST_MODE": "1", "GENSERVICE_RATE_LIMIT_PER_KEY": "0", "GENSERVICE_MAX_ACTIVE_JOBS_PER_ORG": "0", "GENSERVICE_OPERATOR_TOKEN": OPERATOR_TOKEN,
            "GENSERVICE_LOG_LEVEL": "INFO", **self.env,
        })
        if crashpoint:
            env["GENSERVICE_CRASHPOINT"] = crashpoint
        self.log_path = self.data_dir / f"serve-{self.starts}.log"
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child keeps it
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "service", "serve"], env=env,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = LISTENING.search(self.log_path.read_text(errors="replace"))
            if m:
                self.url = m.group(1).rstrip(",")
                return self.url
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        status = self.kill()
        raise StartFailed(f"server did not start (status {status}); log:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> int | None:
        """SIGKILL the process group; the exit status (-9, or what it died with before)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return self.proc.wait(timeout=30)

    def wait_exit(self, timeout: float) -> int | None:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                return self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        return self.kill()

    def log_tail(self, lines: int = 60) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.data_dir.glob("serve-*.log")))
