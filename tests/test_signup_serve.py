"""A self-hoster without SMTP finishes a sign-up on a real `genservice serve`: the
confirmation link is read from the log (the one secret the log may hold), the pending
sign-up is listed and approved with `genservice admin pending` / `approve-org`, the person
logs in; a forgotten password is reset with `genservice admin reset-password`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import httpx
import pytest

from test_hostile_input import OPERATOR, real_server
from waiting import wait_until_sync

PW = "self hosted passphrase"


def csrf(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def admin(server, *args) -> dict | list:
    env = {**os.environ, "GENSERVICE_OPERATOR_TOKEN": OPERATOR, "GENSERVICE_DATA_DIR": str(server.data_dir)}
    out = subprocess.run([sys.executable, "-m", "service", "admin", "--url", server.url, *args], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)["data"]


def link_in_log(server, prefix: str, count: int = 1) -> str:
    def links() -> list[str]:
        found = re.findall(re.escape(prefix) + r"\S+", server.log.read_text(errors="replace"))
        return found if len(found) >= count else []

    return wait_until_sync(links, 20, every=0.05)[count - 1]


@pytest.mark.slow
def test_sign_up_without_smtp_on_a_real_node(tmp_path):
    with real_server(tmp_path) as server, httpx.Client(base_url=server.url, timeout=30) as browser:
        html = browser.get("/signup").text
        r = browser.post("/signup", data={"csrf_token": csrf(html), "email": "self@host.test", "password": PW,
                                          "organization": "Home Lab"})
        assert r.status_code == 200 and "Check your email" in r.text
        link = link_in_log(server, server.url + "/confirm?token=")
        assert "mail (no SMTP host set, not sent) to self@host.test: Confirm your email address" in \
            server.log.read_text()
        assert browser.get(link.removeprefix(server.url)).status_code == 200

        [org] = admin(server, "pending")
        assert (org["name"], org["owner_email"], org["status"]) == ("Home Lab", "self@host.test", "pending")
        admin(server, "approve-org", org["organization_id"])
        assert admin(server, "pending") == []

        html = browser.get("/login").text
        r = browser.post("/login", data={"csrf_token": csrf(html), "email": "self@host.test", "password": PW})
        assert r.status_code == 303
        assert browser.get("/account").status_code == 200

        reset = admin(server, "reset-password", "self@host.test")
        html = browser.get(reset["reset_url"].removeprefix(server.url)).text
        r = browser.post("/reset-password", data={"csrf_token": csrf(html), "token": reset["reset_url"].split("=")[1],
                                                  "password": "a second passphrase"})
        assert r.status_code == 303 and browser.get("/account").status_code == 200
