"""Start `genservice serve` as a subprocess on a free loopback port for benchmarks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager

import httpx


def start_server(extra_env: dict | None = None) -> tuple[subprocess.Popen, str, str, str]:
    """A fresh test-mode server: (process, base_url, operator_token, data_dir). The caller
    stops it (see `running_server`)."""
    data = tempfile.mkdtemp(prefix="genservice-bench-")
    env = {**os.environ, "GENSERVICE_PORT": "0", "GENSERVICE_DATA_DIR": data, "GENSERVICE_TEST_MODE": "1", "GENSERVICE_RATE_LIMIT_PER_KEY": "0", "GENSERVICE_MAX_ACTIVE_JOBS_PER_ORG": "0",
           "GENSERVICE_OPERATOR_TOKEN": "bench-operator", **(extra_env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "service", "serve"], env=env, stderr=subprocess.PIPE, text=True)
    url = None
    deadline = time.monotonic() + 60
    while url is None and time.monotonic() < deadline and proc.poll() is None:
        m = re.search(r"listening on (http://\S+)", proc.stderr.readline())
        if m:
            url = m.group(1).rstrip(",")
    if url is None:
        stop_server(proc)
        raise RuntimeError("server did not start")
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    return proc, url, "bench-operator", data


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@contextmanager
def running_server(extra_env: dict | None = None):
    """Yield (base_url, operator_token, data_dir) of a fresh test-mode server."""
    proc, url, token, data = start_server(extra_env)
    try:
        yield url, token, data
    finally:
        stop_server(proc)


def create_org(url: str, token: str, name: str = "Bench") -> dict:
    r = httpx.post(url + "/operator/v1/organizations", json={"name": name, "owner_email": f"{name}@bench.test"},
                   headers={"Authorization": f"Bearer {token}"}, timeout=30)
    r.raise_for_status()
    return r.json()["data"]
