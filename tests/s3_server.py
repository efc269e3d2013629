"""A real S3-protocol server for the tests: moto's server (`moto_server`) on a free loopback
port, started once per session (`s3` fixture) or per test where a test stops it (`S3Server`).

To run the same tests against MinIO instead, set GENSERVICE_TEST_S3_ENDPOINT (and
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY of that server): the session server is then not
started. The tests that stop the store always use their own moto server.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

FAKE_KEY, FAKE_SECRET = "testing-key", "testing-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without inherited AWS_* settings (this machine sets AWS_CA_BUNDLE),
    with the fake credentials moto accepts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=FAKE_KEY, AWS_SECRET_ACCESS_KEY=FAKE_SECRET, **(extra or {}))
    return env


class S3Server:
    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> S3Server:
        exe = Path(sys.executable).parent / "moto_server"
        if not exe.exists():
            exe = Path(shutil.which("moto_server") or exe)
        self.proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(self.port)], env=clean_env(),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("moto_server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def bucket(self) -> str:
        """A new bucket (one per test, so tests never see each other's objects)."""
        name = f"t-{uuid.uuid4().hex[:16]}"
        client(self.endpoint).create_bucket(Bucket=name)
        return name


def client(endpoint: str):
    from service.assets.s3 import make_client

    return make_client(endpoint, "us-east-1")


class External(S3Server):
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.proc = None


@pytest.fixture(scope="session")
def s3_session():
    endpoint = os.environ.get("GENSERVICE_TEST_S3_ENDPOINT")
    if endpoint:
        yield External(endpoint)
        return
    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_session, monkeypatch):
    """The session's S3 server, with this process's AWS_* environment made safe for it."""
    if not os.environ.get("GENSERVICE_TEST_S3_ENDPOINT"):
        for k in [k for k in os.environ if k.startswith("AWS_")]:
            monkeypatch.delenv(k)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    return s3_session


@pytest.fixture
def own_s3(monkeypatch):
    """A moto server of this test alone (the test may stop it: the store goes down)."""
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    server = S3Server().start()
    yield server
    server.stop()
