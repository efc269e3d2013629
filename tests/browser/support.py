"""Helpers of the browser tests: the node subprocess, operator calls, a fresh organization
per test with its owner logged in through an accepted invitation, screenshots, axe."""

from __future__ import annotations

import re
import socket
import subprocess
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from serve_process import HARNESS_ENV, ServeProcess
from waiting import wait_until_sync

OPERATOR = "browser-operator-token"
PASSWORD = "correct horse battery staple"
ARTEFACTS = Path(__file__).resolve().parent.parent / "artefacts"
AXE = Path(__file__).resolve().parent / "axe-4.14.1.min.js"
WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Node:
    url: str
    proc: subprocess.Popen
    log: Path
    http: httpx.Client

    def op(self, method: str, path: str, json=None) -> httpx.Response:
        return self.http.request(method, "/operator/v1" + path, json=json,
                                 headers={"Authorization": f"Bearer {OPERATOR}"})

    def api(self, method: str, path: str, key: str, **kw) -> httpx.Response:
        return self.http.request(method, path, headers={"Authorization": f"Bearer {key}"}, **kw)

    def new_org(self, credits: str | None = "100") -> dict:
        """A fresh approved organization (its own names), with `credits` granted."""
        tag = uuid.uuid4().hex[:8]
        r = self.op("POST", "/organizations", {"name": f"Org {tag}", "owner_email": f"owner-{tag}@example.test"})
        assert r.status_code == 201, r.text
        org = r.json()["data"]
        org["tag"] = tag
        if credits:
            g = self.op("POST", f"/organizations/{org['organization_id']}/grants", {"credits": credits})
            assert g.status_code in (200, 201), g.text
        return org

    def wait_job(self, key: str, job_id: str, timeout: float = 20.0) -> dict:
        """The job's status once final; it must have completed (a failure says so at once,
        with its status, instead of waiting out the timeout)."""
        def final() -> dict | None:
            st = self.api("GET", f"/v1/generation/requests/{job_id}/status", key).json()
            return st if st["status"] in ("completed", "failed", "nsfw", "canceled") else None

        st = wait_until_sync(final, timeout, every=0.1)
        assert st["status"] == "completed", st
        return st

    def invite(self, org_id: str, email: str, role: str) -> str:
        r = self.op("POST", f"/organizations/{org_id}/invitations", {"email": email, "role": role})
        assert r.status_code == 201, r.text
        return r.json()["data"]["token"]


class Receiver:
    """An https webhook receiver on 127.0.0.1 (a certificate from the test CA) that records
    every POST and answers `status`."""

    def __init__(self, ca, status: int = 204) -> None:
        import ssl
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.received: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.received.append({"headers": dict(self.headers), "body": body})
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert("127.0.0.1").configure_cert(ctx)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@contextmanager
def start_node(tmp: Path, oidc_issuer: str, ca_file: Path, extra_env: dict[str, str]):
    port = free_port()  # known before the start: the base URL the pages and the OIDC client use
    url = f"http://127.0.0.1:{port}"
    env = {**HARNESS_ENV, "GENSERVICE_PORT": str(port), "GENSERVICE_HOST": "127.0.0.1", "GENSERVICE_BASE_URL": url,
           "GENSERVICE_WEBHOOK_ALLOW_PRIVATE": "1", "GENSERVICE_WEBHOOK_CA_FILE": str(ca_file),
           "GENSERVICE_OIDC_NAME": "TestID", "GENSERVICE_OIDC_ISSUER": oidc_issuer,
           "GENSERVICE_OIDC_CLIENT_ID": "genservice", "GENSERVICE_OIDC_CLIENT_SECRET": "s3cret",
           # every browser test signs in from 127.0.0.1 on this one node: the address budget
           # (20, then one every 6 s) is for people, not for a suite
           "GENSERVICE_LOGIN_ATTEMPTS_PER_ADDRESS": "100000", **extra_env}
    with ServeProcess(tmp / "data", env, operator_token=OPERATOR, log_dir=tmp, new_session=True) as node, \
            httpx.Client(base_url=url, timeout=30) as http:
        yield Node(url, node.proc, node.log, http)


def accept_invitation(page, token: str, password: str = PASSWORD) -> None:
    """Accept an invitation in the browser by choosing a password: lands logged in."""
    page.goto(f"/invitations/accept?token={token}")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name=re.compile("Accept|Join", re.I)).click()
    page.wait_for_url(re.compile(r"/studio$"))


def login_new_org(page, node: Node, role: str = "owner", credits: str | None = "100") -> dict:
    """A fresh organization with a new person of `role` logged in in `page`'s context (not the
    operator-made owner: that address is a person already, who accepts only by signing in)."""
    org = node.new_org(credits)
    email = f"{role}-{org['tag']}@dash.example.test"
    accept_invitation(page, node.invite(org["organization_id"], email, role))
    return {**org, "email": email}


def shoot(page, name: str) -> None:
    """Screenshots of the current page at desktop and phone widths into tests/artefacts/."""
    ARTEFACTS.mkdir(exist_ok=True)
    for label, (w, h) in WIDTHS.items():
        page.set_viewport_size({"width": w, "height": h})
        page.screenshot(path=str(ARTEFACTS / f"{name}-{label}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def axe_violations(page) -> list[dict]:
    """axe-core's serious and critical violations of the current page."""
    # evaluated, not added as a <script>: the pages' Content-Security-Policy allows no inline script
    page.evaluate(AXE.read_text() + "\n;undefined")
    result = page.evaluate("async () => await axe.run(document)")
    return [{"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:3]}
            for v in result["violations"] if v["impact"] in ("serious", "critical")]


def check_page(page, name: str) -> None:
    """What every page must hold: one h1, a label on every control, no serious axe finding; plus screenshots."""
    assert page.locator("h1").count() == 1, f"{name}: not exactly one h1"
    unlabeled = page.evaluate("""() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
        .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')).map(e => e.name || e.id)""")
    assert unlabeled == [], f"{name}: controls without a label: {unlabeled}"
    found = axe_violations(page)
    assert found == [], f"{name}: axe: {found}"
    shoot(page, name)
