"""Backups and restores (service/storage/backup.py) against a real `genservice serve`: a
backup taken while clients submit jobs and upload files, the node then killed (-9), the
backup restored into a new data directory and a new node started on it. Every organization
of the backup is there with a consistent ledger (sum of ledger = available), every asset's
bytes match its digest, and the counts equal the backup's own database."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from decimal import Decimal

import pytest

from test_generation_support import multipart
from test_hostile_input import OPERATOR, real_server
from test_media_samples import image_bytes

pytestmark = pytest.mark.slow


def admin(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "service", "admin", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def load(server, keys: list[str], stop: threading.Event, done: list) -> None:
    """Jobs (some rendered, most failing at once) and uploads, until told to stop."""
    n = 0
    while not stop.is_set():
        key = keys[n % len(keys)]
        h = {"Authorization": f"Bearer {key}"}
        prompt = f"load {n}" + ("" if n % 5 == 0 else " [[fail:internal]]")
        r = server.http.post("/v1/generation/capabilities/image.generate", json={"prompt": prompt}, headers=h)
        assert r.status_code == 202, r.text
        if n % 3 == 0:
            body, ctype = multipart([("file", "f.png", "image/png", image_bytes("PNG", 16 + n % 50, 16))])
            r = server.http.post("/v1/generation/uploads", content=body, headers={**h, "Content-Type": ctype})
            assert r.status_code == 201, r.text
        n += 1
    done.append(n)


def settled_balance(server, headers: dict) -> dict:
    """The balance once nothing is held: the jobs the backup caught running are picked up
    again by the new node and settle, and a release between reading the balance and reading
    the ledger would make the two disagree by the hold (the sum holds at every commit, not
    across two requests). Bounded: a hold that never settles fails the test."""
    deadline = time.monotonic() + 120
    while True:
        balance = server.http.get("/v1/billing/balance", headers=headers).json()["data"]
        if Decimal(balance["held"]) == 0:
            return balance
        assert time.monotonic() < deadline, f"a hold never settled after the restore: {balance}"
        time.sleep(0.2)


def test_backup_under_load_kill_restore_and_check(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with real_server(tmp_path / "a") as server:
        keys = [server.create_org()["api_key"] for _ in range(3)]
        stop, done = threading.Event(), []
        worker = threading.Thread(target=load, args=(server, keys, stop, done))
        worker.start()
        try:
            while not done and server.http.get("/healthz").status_code == 200:
                rows = server.http.get("/v1/generation/requests", headers={"Authorization": f"Bearer {keys[0]}"})
                if len(rows.json()["data"]) >= 10:
                    break
            env = {**os.environ, "GENSERVICE_DATA_DIR": str(server.data_dir), "GENSERVICE_OPERATOR_TOKEN": OPERATOR}
            out = admin(env, "backup", str(tmp_path / "backup"))  # while the load runs
            assert out.returncode == 0, out.stderr
            manifest = json.loads(out.stdout)
        finally:
            stop.set()
            worker.join(timeout=60)
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()

    snap = sqlite3.connect(tmp_path / "backup" / "genservice.db")
    counts = {t: snap.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
              for t in ("organizations", "jobs", "assets", "credit_ledger", "credit_holds")}
    assert counts["jobs"] >= 10 and counts["assets"] >= 1
    assert manifest["files"] == snap.execute("SELECT COUNT(DISTINCT sha256) FROM assets").fetchone()[0]
    assert not (tmp_path / "backup" / "node-key").exists()  # a backup alone holds no key
    snap.close()

    restored = tmp_path / "b" / "data"
    env = {**os.environ, "GENSERVICE_DATA_DIR": str(restored)}
    out = admin(env, "restore", str(tmp_path / "backup"))
    assert out.returncode == 0, out.stderr
    out = admin(env, "restore", str(tmp_path / "backup"))  # never over a data directory in use
    assert out.returncode == 1 and f"restore failed: {restored} is not empty" in out.stderr

    with real_server(tmp_path / "b") as again:
        db = sqlite3.connect(restored / "genservice.db")
        now = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in counts}
        # all of the backup is there (jobs it caught running finish now: more ledger rows)
        assert all(now[t] >= counts[t] for t in counts), (now, counts)
        assert (now["organizations"], now["jobs"]) == (counts["organizations"], counts["jobs"])
        for key in keys:
            h = {"Authorization": f"Bearer {key}"}
            balance = settled_balance(again, h)
            ledger = again.http.get("/v1/billing/ledger?limit=500", headers=h).json()["data"]
            assert len(ledger) < 500
            assert sum(Decimal(e["amount"]) for e in ledger) == Decimal(balance["available"])
            assets = again.http.get("/v1/generation/assets?limit=200", headers=h).json()["data"]
            for asset in assets:
                content = again.http.get(f"/v1/generation/assets/{asset['id']}/content", headers=h,
                                         follow_redirects=True)
                assert content.status_code == 200
                assert hashlib.sha256(content.content).hexdigest() == asset["sha256"]


def test_restore_refuses_what_is_not_a_backup(tmp_path):
    env = {**os.environ, "GENSERVICE_DATA_DIR": str(tmp_path / "data")}
    (tmp_path / "nothing").mkdir()
    out = admin(env, "restore", str(tmp_path / "nothing"))
    assert (out.returncode, out.stderr.strip()) == (
        1, f"restore failed: {tmp_path / 'nothing'} is not a backup (no backup.json or genservice.db)")
    out = admin(env, "backup", str(tmp_path / "b"))
    assert out.returncode == 1
    assert out.stderr.strip() == (f"backup failed: no database at {tmp_path / 'data' / 'genservice.db'}: "
                                  "is GENSERVICE_DATA_DIR the node's?")
