"""https served by the node itself (GENSERVICE_TLS_CERT / _KEY) against a real `genservice
serve`, and the client address behind trusted proxies (GENSERVICE_TRUSTED_PROXIES)."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys

import httpx
import pytest
import trustme
from quart import Quart

from serve_process import ServeProcess
from service.http.clientaddr import check_setting, client_address


def test_the_node_serves_https_with_its_own_certificate(tmp_path):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(tmp_path / "node.pem")
    node = ServeProcess(tmp_path / "data", {"GENSERVICE_TLS_CERT": str(tmp_path / "node.pem"),
                                            "GENSERVICE_TLS_KEY": str(tmp_path / "node.pem")},
                        log_dir=tmp_path, start_timeout=30)
    url = node.start()
    try:
        assert url.startswith("https://127.0.0.1:"), url
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        assert httpx.get(url + "/healthz", verify=ctx).json() == {"status": "ok"}
        with pytest.raises(httpx.ConnectError):  # a client that does not trust it refuses it
            httpx.get(url + "/healthz")
    finally:
        assert node.stop() == 0


def test_a_certificate_without_its_key_stops_the_start(tmp_path):
    env = {**os.environ, "GENSERVICE_PORT": "0", "GENSERVICE_DATA_DIR": str(tmp_path / "data"),
           "GENSERVICE_TLS_CERT": str(tmp_path / "node.pem")}
    out = subprocess.run([sys.executable, "-m", "service", "serve"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0
    assert "GENSERVICE_TLS_CERT and GENSERVICE_TLS_KEY go together: set both, or neither" in out.stderr


@pytest.mark.parametrize("peer,forwarded,trusted,expected", [
    ("203.0.113.9", None, None, "203.0.113.9"),                                  # no proxies configured
    ("203.0.113.9", "198.51.100.7", None, "203.0.113.9"),                        # header ignored
    ("203.0.113.9", "198.51.100.7", "10.0.0.0/8", "203.0.113.9"),                # peer is not a proxy of ours
    ("10.0.0.2", "198.51.100.7", "10.0.0.0/8", "198.51.100.7"),                  # one trusted hop
    ("10.0.0.2", "1.2.3.4, 198.51.100.7, 10.0.0.3", "10.0.0.0/8", "198.51.100.7"),  # nearest untrusted hop
    ("10.0.0.2", None, "10.0.0.2", "10.0.0.2"),                                  # proxy sent no header
    ("::1", "2001:db8::5", "::1", "2001:db8::5"),
])
async def test_client_address_behind_trusted_proxies(peer, forwarded, trusted, expected):
    app = Quart(__name__)
    headers = {"Remote-Addr": peer} | ({"X-Forwarded-For": forwarded} if forwarded else {})
    async with app.test_request_context("/", headers=headers):  # Remote-Addr: how Quart carries the peer
        assert client_address(trusted) == expected


def test_a_malformed_proxy_setting_is_refused():
    with pytest.raises(ValueError):
        check_setting("10.0.0.0/8, not-an-address")
