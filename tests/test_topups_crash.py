"""Crash point `payment_verified` on a real `genservice serve`: the process dies (exit 137)
after the top-up is committed `paid` and before its lot exists; the next start grants the
lot exactly once, and paying again adds nothing."""

import os
import re
import subprocess
import sys
import threading
import time

import httpx
import pytest


def serve(data_dir, **extra):
    env = {**os.environ, "GENSERVICE_PORT": "0", "GENSERVICE_DATA_DIR": str(data_dir),
           "GENSERVICE_TEST_MODE": "1", "GENSERVICE_RATE_LIMIT_PER_KEY": "0", "GENSERVICE_MAX_ACTIVE_JOBS_PER_ORG": "0", "GENSERVICE_OPERATOR_TOKEN": "crash-test-token", **extra}
    if "GENSERVICE_CRASHPOINT" not in extra:
        env.pop("GENSERVICE_CRASHPOINT", None)
    proc = subprocess.Popen([sys.executable, "-m", "service", "serve"], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, m.group(1).rstrip(",")
        if proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("server did not start:\n" + "".join(lines))


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=20)
    finally:
        proc.kill()
        proc.stderr.close()


@pytest.mark.slow
def test_crash_between_paid_and_lot_recovers_one_lot(tmp_path):
    op = {"Authorization": "Bearer crash-test-token"}
    proc, url = serve(tmp_path, GENSERVICE_CRASHPOINT="payment_verified")
    try:
        org = httpx.post(url + "/operator/v1/organizations", headers=op,
                         json={"name": "Acme", "owner_email": "o@acme.test"}).json()["data"]
        key = {"Authorization": f"Bearer {org['api_key']}"}
        t = httpx.post(url + "/v1/billing/topups", headers=key, json={"credits": 500}).json()["data"]["topup"]
        with pytest.raises(httpx.HTTPError):  # the process dies while answering
            httpx.post(url + f"/operator/v1/topups/{t['id']}/pay", headers=op, timeout=10)
        assert proc.wait(timeout=10) == 137
    finally:
        stop(proc)

    proc, url = serve(tmp_path)
    try:
        deadline = time.monotonic() + 10
        while True:
            bal = httpx.get(url + "/v1/billing/balance", headers=key).json()["data"]
            if bal["available"] == "700.00" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert bal["available"] == "700.00"
        r = httpx.post(url + f"/operator/v1/topups/{t['id']}/pay", headers=op)
        assert r.status_code == 200 and r.json()["data"]["status"] == "paid"
        assert httpx.get(url + "/v1/billing/balance", headers=key).json()["data"]["available"] == "700.00"
        ledger = httpx.get(url + "/v1/billing/ledger", headers=key).json()["data"]
        assert [e["amount"] for e in ledger if e["source"] == "topup"] == ["500.00"]
    finally:
        stop(proc)
