"""Shared fixtures: an in-process node (real storage on a temp file, real actors, Quart's
test client) and helpers to create organizations through the operator API."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from service.clock import Clock
from service.config import Settings
from service.http.app import create_app
from service.node import build
from service.storage.db import Store
from service.storage.migrate import apply_all
from waiting import wait_until

OPERATOR = "test-operator-token"
START = 1_790_000_000.0  # a fixed service time for deterministic timestamps


class Node:
    def __init__(self, services, app) -> None:
        self.parts = services
        self.app = app
        self.client = app.test_client()
        self.store = services.store
        self.clock = services.clock

    def op_headers(self) -> dict:
        return {"Authorization": f"Bearer {OPERATOR}"}

    async def op(self, method: str, path: str, json=None):
        kw = {} if json is None else {"json": json}
        return await self.client.open("/operator/v1" + path, method=method, headers=self.op_headers(), **kw)

    async def create_org(self, name="Acme", email="owner@acme.test", approved=True) -> dict:
        r = await self.op("POST", "/organizations", {"name": name, "owner_email": email, "approved": approved})
        assert r.status_code == 201, await r.get_data(as_text=True)
        return (await r.get_json())["data"]

    async def add_member(self, org_id: str, role: str, email: str | None = None) -> dict:
        r = await self.op("POST", f"/organizations/{org_id}/members",
                          {"email": email or f"{role}@acme.test", "role": role})
        assert r.status_code == 201, await r.get_data(as_text=True)
        return (await r.get_json())["data"]

    async def call(self, method: str, path: str, key: str | None, json=None, headers=None, **kw):
        h = dict(headers or {})
        if key is not None:
            h["Authorization"] = f"Bearer {key}"
        if json is not None:
            kw["json"] = json
        return await self.client.open(path, method=method, headers=h, **kw)


async def start_node(nursery: trio.Nursery, tmp_path: Path, *, inline: bool = True, **overrides) -> Node:
    # request limits off unless a test sets them (tests/test_limits.py): polling helpers ask
    # many times a second
    settings = Settings(**{"data_dir": tmp_path, "operator_token": OPERATOR, "base_url": "http://testserver",
                           "rate_limit_per_key": 0, "max_active_jobs_per_org": 0, **overrides})
    apply_all(settings.db_path)
    store = Store(settings.db_path, inline=inline)
    services = build(settings, store, Clock(start=START))
    node = Node(services, create_app(services))
    node.scope, node.stopped = await run_parts(nursery, services)
    return node


@pytest.fixture
def cheap_hashes(monkeypatch):
    """argon2's cheapest profile, for modules that log in many times (bench/login.py measures
    the real one): `pytestmark = pytest.mark.usefixtures("cheap_hashes")`."""
    import argon2

    from service import passwords
    monkeypatch.setattr(passwords, "HASHER", argon2.PasswordHasher.from_parameters(argon2.profiles.CHEAPEST))
    monkeypatch.setattr(passwords, "_DUMMY", [])


async def run_parts(nursery: trio.Nursery, services) -> tuple[trio.CancelScope, trio.Event]:
    """Start the node's actors in a scope of their own: cancel it to stop them (before the
    store closes); the event is set once they have stopped."""
    stopped = trio.Event()

    async def run(task_status=trio.TASK_STATUS_IGNORED):
        try:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as inner:
                    await services.start(inner)
                    task_status.started(scope)
        finally:
            stopped.set()

    return await nursery.start(run), stopped


async def stop_node(node: Node) -> None:
    """Shutdown order of a real node: closers, then actors, then storage."""
    await node.parts.aclose()
    node.scope.cancel()
    await node.stopped.wait()
    node.store.close()


class Steps(trio.abc.Instrument):
    """Scheduler steps one task takes while installed."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task, self.taken = task, 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.taken += task is self.task


@contextlib.contextmanager
def steps_taken() -> Iterator[Steps]:
    """Counts the scheduler steps the current task takes inside the block (`.taken`)."""
    steps = Steps(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(steps)
    try:
        yield steps
    finally:
        trio.lowlevel.remove_instrument(steps)


@pytest.fixture
def settling_clock():
    """Mock time that jumps only after 0.1 s of real idleness, so what the kernel or a
    worker thread does meanwhile (a reader's acknowledgements, delayed up to 40 ms; a file
    read) lands before the jump: for tests whose rule is a client's progress on a socket."""
    return trio.testing.MockClock(autojump_threshold=0.1)


@pytest.fixture
async def node(nursery, tmp_path) -> Node:
    n = await start_node(nursery, tmp_path, test_mode=True)
    yield n
    await stop_node(n)


@pytest.fixture(scope="session")
def cog(tmp_path_factory):
    """A real Cog server with the test predictor (tests/engines/cog_predictor.py), once per run."""
    from engine_support import CogServer

    server = CogServer(tmp_path_factory.mktemp("cog") / "cog.log").start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def oidc_issuer():
    """A real OpenID Connect provider (PyPI oidc-provider-mock) in a subprocess, once per
    test session: its import warns, so it never runs inside pytest. Yields its issuer URL."""
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "oidc_provider_mock", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    issuer = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(issuer + "/.well-known/openid-configuration", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("oidc-provider-mock did not start")
            time.sleep(0.1)
        yield issuer
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def smtp(tmp_path_factory):
    """A real SMTP server (aiosmtpd, STARTTLS with a trustme CA, AUTH), once per test run:
    tests/smtp_server.py."""
    from smtp_server import SmtpServer

    server = SmtpServer(tmp_path_factory.mktemp("smtp")).start()
    yield server
    server.stop()


@pytest.fixture
async def mail_node(nursery, tmp_path, smtp) -> Node:
    """A node whose mail goes to the test SMTP server (`smtp`)."""
    n = await start_node(nursery, tmp_path, test_mode=True, **smtp.settings())
    yield n
    await stop_node(n)


# -- helpers shared by the HTTP tests -------------------------------------------------------------
async def get_run(node, key, run_id) -> dict:
    r = await node.call("GET", f"/v1/workflows/runs/{run_id}", key)
    assert r.status_code == 200
    return (await j(r))["data"]


async def wait_for_run(node, key, run_id, pred, timeout=60) -> dict:
    """The product run once `pred(run)` holds (its status read every 20 ms)."""
    async def ready() -> dict | None:
        run = await get_run(node, key, run_id)
        return run if pred(run) else None

    return await wait_until(ready, timeout, every=0.02)


async def until(check, timeout: float = 10.0, *, real_time: bool = False) -> None:
    """Wait for a condition of the node's state, not for a fixed time (tests/waiting.py)."""
    await wait_until(check, timeout, real_time=real_time)


async def outboxes_settled(node, timeout: float = 10.0, *, real_time: bool = False) -> None:
    """Wait until the node's outboxes have nothing left to do now: every event fanned out,
    every account and job webhook final, no mail being sent, nothing in flight. Webhooks are
    never retried, so what a test then finds absent stays absent: no fixed wait is needed."""
    parts, store = node.parts, node.store
    dispatchers = (parts.account_webhooks, parts.generation.webhooks, parts.mail)

    def settled() -> bool:
        return (all(d.in_flight == 0 for d in dispatchers)
                and store.scalar("SELECT count(*) FROM events WHERE dispatched = 0") == 0
                and store.scalar("SELECT count(*) FROM webhook_deliveries WHERE status IN ('pending', 'sending')") == 0
                and store.scalar("SELECT count(*) FROM job_webhooks WHERE state IN ('waiting', 'pending', 'sending')") == 0
                and store.scalar("SELECT count(*) FROM emails WHERE state = 'sending' OR "
                                 "(state = 'pending' AND next_attempt_at <= ?)", (node.clock.now(),)) == 0)

    await until(settled, timeout, real_time=real_time)


async def j(r):
    """A test-client response's JSON body."""
    return await r.get_json()


def err(body: dict) -> dict:
    """An error envelope's `error` without its request id (checked to be there)."""
    e = dict(body["error"])
    rid = e.pop("request_id")
    assert isinstance(rid, str) and rid
    return e


@pytest.fixture
async def org(node):
    """A new approved organization through the operator API (files with their own kind of
    organization define their own `org` fixture)."""
    return await node.create_org()


def pytest_collection_modifyitems(config, items):
    """The test files that need llama-cpp-python's server (the `llama` fixture or mark) run
    last, in their order: on a fresh machine scripts/test builds it meanwhile (scripts/setup)."""
    for i in items:
        if "llama" in i.fixturenames:
            i.add_marker("llama")  # so `-m "not llama"` leaves out every user of the server
    late = {i.nodeid.split("::")[0] for i in items if i.get_closest_marker("llama")}
    items[:] = ([i for i in items if i.nodeid.split("::")[0] not in late]
                + [i for i in items if i.nodeid.split("::")[0] in late])
