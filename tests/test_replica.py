"""GENSERVICE_REPLICA_URL: `genservice serve` runs Litestream against a real S3-protocol
server (moto's, tests/s3_server.py); write, kill -9, delete the data directory,
`genservice admin restore-replica`, and the balances and ledgers come back exactly."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time

import httpx
import pytest

from s3_server import FAKE_KEY, FAKE_SECRET, clean_env, s3, s3_session  # noqa: F401 - fixtures
from serve_process import HARNESS_ENV, ServeProcess
from service.config import Settings
from service.replica import ReplicaError, config_text, restore
from waiting import wait_until, wait_until_sync

TOKEN = "replica-operator-token"
TABLES = ("organizations", "credit_lots", "credit_ledger", "credit_holds", "api_keys")


def replica_env(s3, bucket: str) -> dict[str, str]:
    return {**HARNESS_ENV, "GENSERVICE_REPLICA_URL": f"s3://{bucket}/db", "GENSERVICE_S3_ENDPOINT_URL": s3.endpoint,
            "AWS_ACCESS_KEY_ID": FAKE_KEY, "AWS_SECRET_ACCESS_KEY": FAKE_SECRET,
            "AWS_CA_BUNDLE": "/nonexistent/ca.pem"}  # what the node's environment may hold: not passed on


def dump(db) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in TABLES}
    finally:
        conn.close()


def admin_restore(env: dict[str, str], data_dir) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "service", "admin", "restore-replica", str(data_dir)],
                          env={**clean_env(), **env}, capture_output=True, text=True, timeout=600)


def test_write_kill_delete_restore_gives_back_every_balance_and_ledger(s3, tmp_path):
    bucket = s3.bucket()
    env = replica_env(s3, bucket)
    data = tmp_path / "data"
    node = ServeProcess(data, env, operator_token=TOKEN, log_dir=tmp_path / "logs", new_session=True)
    old = os.environ.get("AWS_CA_BUNDLE")
    node.start()
    try:
        with httpx.Client(base_url=node.url, headers=node.op, timeout=30) as http:
            orgs = []
            for i in range(3):
                r = http.post("/operator/v1/organizations",
                              json={"name": f"Org {i}", "owner_email": f"o{i}@x.test", "approved": True})
                assert r.status_code == 201, r.text
                orgs.append(r.json()["data"]["organization_id"])
            for n, org in enumerate(orgs):
                r = http.post(f"/operator/v1/organizations/{org}/grants",
                              json={"credits": f"{n + 1}.25", "source": "promo", "reason": "replica test"})
                assert r.status_code in (200, 201), r.text
        expected = dump(data / "genservice.db")
        # wait until the replica holds the last write (Litestream ships every second)
        def caught_up() -> bool:
            probe = tmp_path / f"probe-{time.monotonic_ns()}"
            done = admin_restore(env, probe)
            return done.returncode == 0 and dump(probe / "genservice.db") == expected

        wait_until_sync(caught_up, timeout=120, every=0.5)
    finally:
        node.kill()  # kill -9 of the node and its Litestream child
    assert old == os.environ.get("AWS_CA_BUNDLE")
    shutil.rmtree(data)
    done = admin_restore(env, data)
    assert done.returncode == 0, done.stderr
    assert dump(data / "genservice.db") == expected
    # the restored node serves as before the loss
    again = ServeProcess(data, env, operator_token=TOKEN, log_dir=tmp_path / "logs2")
    again.start()
    try:
        r = httpx.get(f"{again.url}/operator/v1/organizations", headers=again.op, timeout=30)
        assert r.status_code == 200 and len(r.json()["data"]) == 3
    finally:
        again.stop()


def test_restore_replica_refuses_a_non_empty_directory(s3, tmp_path):
    env = replica_env(s3, s3.bucket())
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep.txt").write_text("mine")
    done = admin_restore(env, tmp_path / "d")
    assert done.returncode == 1
    assert done.stderr.strip() == (f"restore-replica failed: {tmp_path / 'd'} is not empty: "
                                   "restore into an absent or empty directory")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["keep.txt"]


def test_restore_replica_without_a_replica_url_is_refused(tmp_path):
    with pytest.raises(ReplicaError, match="GENSERVICE_REPLICA_URL is not set"):
        restore(Settings(data_dir=tmp_path / "x"), tmp_path / "x")


def test_a_replica_url_that_is_not_s3_is_refused(tmp_path):
    with pytest.raises(ReplicaError, match="must be s3://BUCKET/PATH"):
        config_text(tmp_path / "db", "https://bucket/db", None, "us-east-1")


async def test_litestream_is_restarted_when_it_exits_and_stopped_with_the_node(tmp_path, monkeypatch):
    import trio

    from service import replica

    runs = tmp_path / "runs"
    fake = tmp_path / "litestream"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {runs}\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(replica, "litestream_path", lambda: str(fake))
    monkeypatch.setattr(replica, "FIRST_PAUSE", 0.01)
    settings = Settings(data_dir=tmp_path, replica_url="s3://bucket/db", s3_endpoint_url="http://127.0.0.1:9")
    async with trio.open_nursery() as nursery:
        await nursery.start(replica.supervise, settings)
        await wait_until(lambda: runs.exists() and len(runs.read_text().splitlines()) >= 3, 30)
        nursery.cancel_scope.cancel()
    lines = runs.read_text().splitlines()
    assert lines[0] == f"replicate -no-expand-env -config {tmp_path / 'litestream.yml'}"
    assert "force-path-style: true" in (tmp_path / "litestream.yml").read_text()
