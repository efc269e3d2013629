"""A threaded HTTPS webhook receiver on 127.0.0.1 that records every request.

The certificate (for 127.0.0.1 and localhost) comes from a trustme CA whose PEM is written
to `ca_file`: give it to the node as `GENSERVICE_WEBHOOK_CA_FILE` together with
`GENSERVICE_WEBHOOK_ALLOW_PRIVATE=1`. It runs in threads, independent of the node and of the
driver's event loop, and survives the node's restarts.

The path picks the answer: `/ok...` 200, `/status/NNN` that status, `/slow/S...` 200 after
S seconds. Anything else: 200.

    with Receiver() as rx:
        rx.url("/ok/org1"); rx.requests (list of Request); rx.count(path_prefix)
"""

from __future__ import annotations

import ssl
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import trustme


@dataclass
class Request:
    time: float
    method: str
    path: str
    headers: dict
    body: bytes

    def header(self, name: str) -> str | None:
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        rx: Receiver = self.server.receiver  # type: ignore[attr-defined]
        rx._record(Request(time.time(), "POST", self.path, dict(self.headers.items()), body))
        status = 200
        parts = self.path.strip("/").split("/")
        if parts[0] == "status" and len(parts) > 1 and parts[1].isdigit():
            status = int(parts[1])
        elif parts[0] == "slow" and len(parts) > 1:
            try:
                time.sleep(min(float(parts[1]), 30.0))
            except ValueError:
                pass
        payload = b'{"ok":true}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_PUT = do_POST  # noqa: N815


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def finish_request(self, request, client_address) -> None:
        # the TLS handshake happens in the request's own thread, never in the accept loop
        try:
            request = self.ctx.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            request.close()
            return
        try:
            super().finish_request(request, client_address)
        except (OSError, ssl.SSLError):
            pass
        finally:
            try:
                request.close()
            except OSError:
                pass


class Receiver:
    def __init__(self, directory: str | Path | None = None) -> None:
        self.dir = Path(directory or tempfile.mkdtemp(prefix="genservice-rx-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA()
        self.ca_file = self.dir / "webhook-ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(ctx)
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.ctx = ctx  # type: ignore[attr-defined]
        self._server.receiver = self  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True)

    def env(self) -> dict:
        return {"GENSERVICE_WEBHOOK_CA_FILE": str(self.ca_file), "GENSERVICE_WEBHOOK_ALLOW_PRIVATE": "1"}

    def url(self, path: str = "/ok") -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def _record(self, r: Request) -> None:
        with self._lock:
            self.requests.append(r)

    def snapshot(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    def count(self, prefix: str = "/") -> int:
        return sum(1 for r in self.snapshot() if r.path.startswith(prefix))

    def start(self) -> "Receiver":
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "Receiver":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
