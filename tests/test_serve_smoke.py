"""One real `genservice serve` on port 0: health, operator token file, an org through
`genservice admin`, an authenticated call, and a clean exit on SIGTERM."""

import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time

import httpx


def start(tmp_path):
    env = {**os.environ, "GENSERVICE_PORT": "0", "GENSERVICE_DATA_DIR": str(tmp_path / "data"),
           "GENSERVICE_TEST_MODE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "service", "serve"], env=env, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 30
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        m = re.search(r"listening on (http://\S+)", line)
        if m:  # keep draining the log so the server never blocks on a full pipe
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, m.group(1).rstrip(","), env
        if proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("server did not start:\n" + "".join(lines))


def test_serve_admin_and_shutdown(tmp_path):
    proc, url, env = start(tmp_path)
    try:
        assert httpx.get(url + "/healthz").json() == {"status": "ok"}
        token_file = tmp_path / "data" / "operator-token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
        assert stat.S_IMODE((tmp_path / "data" / "genservice.db").stat().st_mode) == 0o600
        out = subprocess.run([sys.executable, "-m", "service", "admin", "--url", url, "create-org",
                              "Acme", "owner@acme.test"], env=env, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        org = json.loads(out.stdout)["data"]
        r = httpx.get(url + "/v1/projects", headers={"Authorization": f"Bearer {org['api_key']}"})
        assert r.status_code == 200 and r.json()["data"][0]["slug"] == "default"
        assert "X-Process-Time" in r.headers
        r = httpx.get(url + "/v1/projects")
        assert r.status_code == 401
        with httpx.Client() as c:  # keep-alive: a 405 with an unread body must not hang the next request
            for _ in range(20):
                assert c.post(url + "/healthz", content=b"x" * 1000, timeout=5).status_code == 405
                assert c.get(url + "/healthz", timeout=5).status_code == 200
                # the upload route streams its own body; other methods on its path must drain it
                r = c.patch(url + "/v1/generation/uploads", content=b"x" * 5000, timeout=5,
                            headers={"Authorization": f"Bearer {org['api_key']}",
                                     "Content-Type": "multipart/form-data; boundary=b"})
                assert r.status_code == 405
                assert c.get(url + "/healthz", timeout=5).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=20)
        finally:
            proc.kill()
            proc.stderr.close()
    assert code == 0


def test_open_streams_end_with_a_comment_at_shutdown(tmp_path):
    """SIGTERM with 50 event streams open: each gets the shutdown comment and its end, so
    the HTTP drain is not held by them (serve() closes the stream hub when shutdown begins)."""
    import socket
    from urllib.parse import urlsplit

    proc, url, env = start(tmp_path)
    socks = []
    try:
        out = subprocess.run([sys.executable, "-m", "service", "admin", "--url", url, "create-org",
                              "Acme", "owner@acme.test"], env=env, capture_output=True, text=True, timeout=30)
        key = json.loads(out.stdout)["data"]["api_key"]
        host, port = urlsplit(url).hostname, urlsplit(url).port
        for _ in range(50):
            s = socket.create_connection((host, port), timeout=20)
            s.sendall(f"GET /v1/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
            head = b""
            while b"event: feed" not in head:
                head += s.recv(65536)
            assert head.startswith(b"HTTP/1.1 200")
            socks.append(s)
    finally:
        proc.send_signal(signal.SIGTERM)
    try:
        for s in socks:
            rest = b""
            while chunk := s.recv(65536):
                rest += chunk
            assert b": the node is shutting down" in rest
            s.close()
        code = proc.wait(timeout=20)
    finally:
        proc.kill()
        proc.stderr.close()
    assert code == 0
