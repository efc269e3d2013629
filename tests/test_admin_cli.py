"""`genservice admin`: which URL it calls (the same settings as serve, `--url`, the URL the node
on the data directory wrote), one line and a non-zero status when the node cannot be reached
or the settings cannot be read, and no import of the node itself."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from serve_process import ServeProcess
from service.config import load_settings
from service.local_node import node_url, write_url


def settings(tmp_path, **env):
    return load_settings(environ={"GENSERVICE_DATA_DIR": str(tmp_path), **env})


def test_the_url_follows_url_then_base_url_then_a_port_set_then_the_node_file(tmp_path):
    assert node_url(settings(tmp_path)) == "http://127.0.0.1:8000"
    write_url(settings(tmp_path), "http://127.0.0.1:8765")
    assert node_url(settings(tmp_path)) == "http://127.0.0.1:8765"
    assert node_url(settings(tmp_path, GENSERVICE_PORT="0")) == "http://127.0.0.1:8765"
    assert node_url(settings(tmp_path, GENSERVICE_PORT="9001")) == "http://127.0.0.1:9001"
    assert node_url(settings(tmp_path, GENSERVICE_BASE_URL="https://gen.example/")) == "https://gen.example"
    assert node_url(settings(tmp_path), "http://10.0.0.5:8000/") == "http://10.0.0.5:8000"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def admin(tmp_path, *argv, env=None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GENSERVICE_")}
    environ.update({"GENSERVICE_DATA_DIR": str(tmp_path / "data"), **(env or {})})
    return subprocess.run([sys.executable, "-m", "service", "admin", *argv], env=environ,
                          capture_output=True, text=True, timeout=30)


def test_an_unreachable_node_is_one_line_and_status_2(tmp_path):
    port = free_port()
    out = admin(tmp_path, "pending", env={"GENSERVICE_PORT": str(port)})
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"genservice admin: cannot reach the node at http://127.0.0.1:{port} ([Errno 111] Connection refused). "
        "Is `genservice serve` running? Give its address with --url, or the same --config and GENSERVICE_* "
        "settings as serve."]


def test_unreadable_settings_are_one_line(tmp_path):
    out = admin(tmp_path, "--config", str(tmp_path / "missing.toml"), "pending")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr == f"genservice: cannot read the config file {tmp_path / 'missing.toml'}: No such file or directory\n"
    assert len(out.stderr.splitlines()) == 1


def test_admin_imports_neither_the_node_nor_an_http_library():
    code = ("import sys; from service.cli import build_parser; import service.local_node, service.config; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('trio', 'httpx', 'quart', 'hypercorn') "
            "or m in ('service.node', 'service.main')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_admin_finds_a_node_started_on_another_port_through_the_data_directory(tmp_path):
    node = ServeProcess(tmp_path / "data", {"GENSERVICE_TEST_MODE": "1"}, log_dir=tmp_path, start_timeout=30)
    node.start()
    try:
        # the node was started with its own port (0: a free one); admin is given only the data dir
        out = admin(tmp_path, "create-org", "Acme", "owner@acme.test")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["data"]["api_key"].startswith("aak_")
        out = admin(tmp_path, "--url", node.url, "approve-org", "org_nope")
        assert out.returncode == 1 and json.loads(out.stdout)["error"]["code"]
    finally:
        assert node.stop() == 0
    log = node.log.read_text()
    assert "TEST MODE: prompt directives, the test payment provider" in log
    assert f"open {node.url}/ in a browser" in log and "genservice admin approve-org ORG_ID" in log


def test_an_id_is_one_path_segment(tmp_path):
    """An id with `/`, `?` or `#` stays in its segment: it cannot reach another route."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen = []

    class Node(BaseHTTPRequestHandler):
        def do_PATCH(self):
            seen.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b'{"error": {"code": "request.not_found", "message": "Member not found."}}'
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Node)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = admin(tmp_path, "--url", f"http://127.0.0.1:{server.server_port}", "set-role", "org/x?y#z",
                    "../../topups/t", "admin")
    finally:
        server.shutdown()
        server.server_close()
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout) == {"error": {"code": "request.not_found", "message": "Member not found."}}
    assert seen == ["/operator/v1/organizations/org%2Fx%3Fy%23z/members/..%2F..%2Ftopups%2Ft"]
