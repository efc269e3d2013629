"""`genservice serve` as a subprocess, started and waited for: the one copy shared by the
tests, bench/ (through bench/server.py) and reliability/ (reliability/server.py's `Node`).

The node listens on port 0 unless `env` says otherwise, with its data in `data_dir`. Its
output goes to a file, `LOG_DIR/serve-N.log` (the first N not taken, so restarts and several
processes on one directory keep their own), never to a pipe: nothing has to drain it for
the server not to block, and the whole log is there for a failure message.

    node = ServeProcess(data_dir, {**HARNESS_ENV, ...}, operator_token="t")
    node.start()          # waits for "listening on"; node.url, node.op (headers), node.log
    node.kill()           # SIGKILL (the process group with new_session=True); the status
    node.wait_exit(10)    # the status it died with (137 at a crash point), None if alive
    node.stop()           # SIGTERM, then SIGKILL after 20 s; the status
    with ServeProcess(...) as node: ...   # start, then stop
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from itertools import count
from pathlib import Path

# What most harnesses run with: test mode, and neither the per-key rate limit nor the
# per-organization job cap getting in the way of a load.
HARNESS_ENV = {"GENSERVICE_TEST_MODE": "1", "GENSERVICE_RATE_LIMIT_PER_KEY": "0",
               "GENSERVICE_MAX_ACTIVE_JOBS_PER_ORG": "0"}
LISTENING = re.compile(r"genservice listening on (https?://[^\s,]+)")


class StartFailed(RuntimeError):
    pass


class ServeProcess:
    def __init__(self, data_dir: str | Path, env: dict | None = None, *, operator_token: str | None = None,
                 log_dir: str | Path | None = None, cwd: str | Path | None = None, new_session: bool = False,
                 inherit_env: bool = True, start_timeout: float = 60.0) -> None:
        """`env` goes over the defaults (port 0, the data dir); `inherit_env=False` drops the
        caller's own GENSERVICE_* settings; `new_session` puts the node in its own process
        group so that kill() takes its children too."""
        self.data_dir = Path(data_dir)
        self.env = dict(env or {})
        self.operator_token = operator_token
        self.log_dir = Path(log_dir) if log_dir is not None else self.data_dir
        self.cwd = cwd
        self.new_session = new_session
        self.inherit_env = inherit_env
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.log: Path | None = None
        self.environ: dict[str, str] = {}

    @property
    def op(self) -> dict:
        return {"Authorization": f"Bearer {self.operator_token}"}

    @property
    def db_path(self) -> Path:
        return self.data_dir / "genservice.db"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, crashpoint: str | None = None, timeout: float | None = None) -> str:
        """The base URL once the node logs that it listens. A crash point only when asked
        for: one left in the caller's environment is not passed on."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        env = {k: v for k, v in os.environ.items()
               if k != "GENSERVICE_CRASHPOINT" and (self.inherit_env or not k.startswith("GENSERVICE_"))}
        env.update({"GENSERVICE_PORT": "0", "GENSERVICE_DATA_DIR": str(self.data_dir), **self.env})
        if self.operator_token is not None:
            env["GENSERVICE_OPERATOR_TOKEN"] = self.operator_token
        if crashpoint:
            env["GENSERVICE_CRASHPOINT"] = crashpoint
        self.environ = env
        self.url = None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        n = next(n for n in count(1) if not (self.log_dir / f"serve-{n}.log").exists())
        self.log = self.log_dir / f"serve-{n}.log"
        with open(self.log, "wb") as out:  # the child has its own copy of the descriptor
            self.proc = subprocess.Popen([sys.executable, "-m", "service", "serve"], env=env, cwd=self.cwd,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=self.new_session)
        deadline = time.monotonic() + (self.start_timeout if timeout is None else timeout)
        while time.monotonic() < deadline:
            m = LISTENING.search(self.log.read_text(errors="replace"))
            if m:
                self.url = m.group(1)
                return self.url
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        status = self.kill()
        raise StartFailed(f"server did not start (status {status}); log {self.log}:\n"
                          + self.log.read_text(errors="replace"))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> int | None:
        """SIGKILL; the exit status (-9, or what it died with before)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                if self.new_session:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                else:
                    self.proc.kill()
            except ProcessLookupError:
                pass
        return self.proc.wait(timeout=30)

    def wait_exit(self, timeout: float) -> int | None:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM, and SIGKILL if it has not exited after `timeout` s; the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            if (status := self.wait_exit(timeout)) is not None:
                return status
        return self.kill()

    def log_tail(self, lines: int = 60) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> ServeProcess:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
