"""Crash point `payment_verified` on a real `genservice serve`: the process dies (exit 137)
after the top-up is committed `paid` and before its lot exists; the next start grants the
lot exactly once, and paying again adds nothing."""


import httpx
import pytest

from serve_process import HARNESS_ENV, ServeProcess
from waiting import wait_until_sync


def serve(data_dir, crashpoint: str | None = None, **extra) -> ServeProcess:
    node = ServeProcess(data_dir, {**HARNESS_ENV, **extra}, operator_token="crash-test-token", start_timeout=30)
    node.start(crashpoint)
    return node


@pytest.mark.slow
def test_crash_between_paid_and_lot_recovers_one_lot(tmp_path):
    op = {"Authorization": "Bearer crash-test-token"}
    node = serve(tmp_path, "payment_verified")
    url = node.url
    try:
        org = httpx.post(url + "/operator/v1/organizations", headers=op,
                         json={"name": "Acme", "owner_email": "o@acme.test"}).json()["data"]
        key = {"Authorization": f"Bearer {org['api_key']}"}
        t = httpx.post(url + "/v1/billing/topups", headers=key, json={"credits": 500}).json()["data"]["topup"]
        with pytest.raises(httpx.HTTPError):  # the process dies while answering
            httpx.post(url + f"/operator/v1/topups/{t['id']}/pay", headers=op, timeout=10)
        assert node.wait_exit(10) == 137
    finally:
        node.stop()

    node = serve(tmp_path)
    url = node.url
    try:
        def available() -> str:
            return httpx.get(url + "/v1/billing/balance", headers=key).json()["data"]["available"]

        wait_until_sync(lambda: available() == "700.00", 10, every=0.05)
        r = httpx.post(url + f"/operator/v1/topups/{t['id']}/pay", headers=op)
        assert r.status_code == 200 and r.json()["data"]["status"] == "paid"
        assert httpx.get(url + "/v1/billing/balance", headers=key).json()["data"]["available"] == "700.00"
        ledger = httpx.get(url + "/v1/billing/ledger", headers=key).json()["data"]
        assert [e["amount"] for e in ledger if e["source"] == "topup"] == ["500.00"]
    finally:
        node.stop()
