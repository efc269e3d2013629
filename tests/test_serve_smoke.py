"""One real `genservice serve` on port 0: health, operator token file, an org through
`genservice admin`, an authenticated call, and a clean exit on SIGTERM."""

import json
import signal
import stat
import subprocess
import sys

import httpx

from serve_process import ServeProcess


def start(tmp_path) -> ServeProcess:
    """Test mode and nothing else: no operator token (the node writes its own file)."""
    node = ServeProcess(tmp_path / "data", {"GENSERVICE_TEST_MODE": "1"}, log_dir=tmp_path, start_timeout=30)
    node.start()
    return node


def test_serve_admin_and_shutdown(tmp_path):
    node = start(tmp_path)
    url, env = node.url, node.environ
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
        code = node.stop()
    assert code == 0


def test_open_streams_end_with_a_comment_at_shutdown(tmp_path):
    """SIGTERM with 50 event streams open: each gets the shutdown comment and its end, so
    the HTTP drain is not held by them (serve() closes the stream hub when shutdown begins)."""
    import socket
    from urllib.parse import urlsplit

    node = start(tmp_path)
    url, env = node.url, node.environ
    socks = []
    try:
        keys = []  # three organizations: 50 streams are past one key's bound (docs/streams.md, "Limits")
        for name in ("Acme", "Beta", "Gamma"):
            out = subprocess.run([sys.executable, "-m", "service", "admin", "--url", url, "create-org",
                                  name, f"owner@{name.lower()}.test"], env=env, capture_output=True, text=True,
                                 timeout=30)
            keys.append(json.loads(out.stdout)["data"]["api_key"])
        host, port = urlsplit(url).hostname, urlsplit(url).port
        for i in range(50):
            key = keys[i % 3]
            s = socket.create_connection((host, port), timeout=20)
            s.sendall(f"GET /v1/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
            head = b""
            while b"event: feed" not in head:
                head += s.recv(65536)
            assert head.startswith(b"HTTP/1.1 200")
            socks.append(s)
    finally:
        node.proc.send_signal(signal.SIGTERM)
    try:
        for s in socks:
            rest = b""
            while chunk := s.recv(65536):
                rest += chunk
            assert b": the node is shutting down" in rest
            s.close()
        code = node.proc.wait(timeout=20)
    finally:
        node.kill()
    assert code == 0
