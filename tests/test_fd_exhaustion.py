"""Probe H1 against a real `genservice serve` under a 256-descriptor limit (soft and hard, so
the node cannot raise it): members open more event streams than the node can hold, and the
node stays reachable (`/healthz`, login page, operator API) because streams stop 128 short of
the limit; then idle connections use up every descriptor, and the accept loop waits quietly
(no traceback) and takes connections again once they are gone."""

from __future__ import annotations

import os
import re
import resource
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from serve_process import HARNESS_ENV, LISTENING
from waiting import wait_until_sync

pytestmark = pytest.mark.slow

OPERATOR = "fd-operator-token"
LIMIT = 256


def low_limit() -> None:  # runs in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def start(tmp: Path) -> tuple[subprocess.Popen, str, Path]:
    env = {**HARNESS_ENV, "GENSERVICE_PORT": "0", "GENSERVICE_HOST": "127.0.0.1",
           "GENSERVICE_DATA_DIR": str(tmp / "data"), "GENSERVICE_OPERATOR_TOKEN": OPERATOR}
    log = tmp / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "service", "serve"], env={**_base_env(), **env},
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=low_limit)
    def listening():
        assert proc.poll() is None, log.read_text(errors="replace")
        return LISTENING.search(log.read_text(errors="replace"))

    try:
        m = wait_until_sync(listening, timeout=60, every=0.05)
    except TimeoutError:
        proc.kill()
        raise AssertionError("no start: " + log.read_text(errors="replace")) from None
    return proc, m.group(1), log


def _base_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("GENSERVICE_")}


def open_stream(port: int, key: str) -> tuple[int, socket.socket]:
    """A raw GET /v1/events kept open; its status and socket."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        assert chunk, head
        head += chunk
    return int(head.split(b" ", 2)[1]), s


def close(s: socket.socket) -> None:
    s.close()


def reachable(http: httpx.Client) -> None:
    assert http.get("/healthz").status_code == 200
    assert http.get("/login").status_code == 200
    r = http.get("/operator/v1/organizations", headers={"Authorization": f"Bearer {OPERATOR}"})
    assert r.status_code == 200, r.text


def test_streams_never_take_the_last_descriptors_and_accept_errors_are_quiet(tmp_path):
    proc, url, log = start(tmp_path)
    port = int(url.rsplit(":", 1)[1])
    held: list[socket.socket] = []
    try:
        text = log.read_text()
        assert f"file descriptors: limit {LIMIT} (hard {LIMIT}); event streams at most 128" in text
        with httpx.Client(base_url=url, timeout=10) as op:
            keys = []
            for i in range(7):
                r = op.post("/operator/v1/organizations", headers={"Authorization": f"Bearer {OPERATOR}"},
                            json={"name": f"Org {i}", "owner_email": f"owner{i}@fd.test"})
                assert r.status_code == 201, r.text
                keys.append(r.json()["data"]["api_key"])
        statuses = []
        for key in keys:  # 140 streams asked for, 20 per key: 128 fit
            for _ in range(20):
                status, s = open_stream(port, key)
                statuses.append(status)
                (held.append if status == 200 else close)(s)
        assert statuses.count(200) == 128 and statuses.count(503) == 12, statuses
        status, s = open_stream(port, keys[0])
        s.close()
        assert status == 429  # its key's bound comes first
        with httpx.Client(base_url=url, timeout=10) as http:  # fresh connections: still served
            reachable(http)

        idle = []  # now use up the rest: connections that send nothing
        for _ in range(200):
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            except OSError:  # the listen backlog is full too
                break
        assert len(idle) > LIMIT - 128
        # the node hits EMFILE and says so (once), then retries its accepts
        wait_until_sync(lambda: "cannot accept connections: Too many open files" in log.read_text(), timeout=30)
        for s in idle:
            s.close()
        def answers() -> bool:
            try:
                with httpx.Client(base_url=url, timeout=5) as http:
                    reachable(http)
                return True
            except (httpx.HTTPError, AssertionError):
                return False

        try:
            wait_until_sync(answers, timeout=30, every=0.5)
        except TimeoutError:
            raise AssertionError(log.read_text()[-3000:]) from None
        assert proc.poll() is None
        text = log.read_text()
        refusals = re.findall(r"cannot accept connections: Too many open files", text)
        assert 1 <= len(refusals) <= 2, text[-3000:]
        assert "Traceback" not in text and "EMFILE" not in text, text[-3000:]
    finally:
        for s in held:
            s.close()
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
