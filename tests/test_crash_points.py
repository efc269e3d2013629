"""Named crash points (reliability.md R2, §6.2): for every point in `service.crash.POINTS`,
the minimal scenarios that reach it against a real `genservice serve` subprocess. Each
scenario arms the point, checks the node died with 137 there, restarts it without the
point on the same data dir, waits for quiescence, and checks every invariant
(reliability/checker.py: I1-I10, the webhook outbox against the receiver, credit drift 0)
and the scenario's own end state. A meta test fails when a point has no scenario.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from contextlib import closing
from decimal import Decimal
from pathlib import Path

import pytest

from service.crash import POINTS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))

from receiver import Receiver  # noqa: E402
from scenario import SIGNUP, Scenario, new_tag, png_bytes  # noqa: E402
from waiting import wait_until_sync  # noqa: E402

pytestmark = pytest.mark.slow

SCENARIOS: dict[str, callable] = {}


def scenario(point: str, variant: str = ""):
    def register(fn):
        SCENARIOS[f"{point}/{variant}" if variant else point] = fn
        fn.point = point
        return fn
    return register


@pytest.fixture
def rx(tmp_path):
    r = Receiver(tmp_path / "rx").start()  # one per scenario: its requests are the node's
    yield r
    r.close()


# -- hold_committed ------------------------------------------------------------------------------
@scenario("hold_committed")
def hold_committed_api(s: Scenario) -> None:
    tag = new_tag()
    s.start("hold_committed")
    s.expect_crash(lambda: s.submit(f"{tag} [[delay:0.2]]"))  # the 202 never arrives
    s.restart()
    s.check(charged=Decimal("1.00"))  # the committed job is resumed and charged once
    jobs = s.db("SELECT * FROM jobs WHERE prompt LIKE ?", (f"{tag}%",))
    assert [j["status"] for j in jobs] == ["completed"]


@scenario("hold_committed", "product_step")
def hold_committed_step(s: Scenario) -> None:
    s.start("hold_committed")
    r = s.post("/v1/workflows/products/text-to-clip/runs", json={"inputs": {"prompt": "step hold"}})
    assert r.status_code == 202, r.text
    run_id = r.json()["data"]["id"]
    s.expect_crash()  # the still step's job is committed, its render not started
    s.restart()
    s.check(charged=Decimal("11.00"))
    run = s.get(f"/v1/workflows/runs/{run_id}").json()["data"]
    assert run["status"] == "completed", run
    jobs = s.db("SELECT id, status FROM jobs WHERE workflow_run_id = ?", (run_id,))
    assert sorted(j["status"] for j in jobs) == ["completed", "completed"]  # one job per step


# -- output_produced -----------------------------------------------------------------------------
@scenario("output_produced")
def output_produced(s: Scenario) -> None:
    s.start("output_produced")
    r = s.submit("render me")
    assert r.status_code == 202, r.text
    job_id = r.json()["request_id"]
    s.expect_crash()
    s.restart()
    s.check(charged=Decimal("1.00"))
    st = s.get(f"/v1/generation/requests/{job_id}/status").json()
    assert st["status"] == "completed" and len(st["outputs"]) == 1, st
    assert st["outputs"][0]["url"].startswith(s.node.url + "/")  # port 0: URLs carry the bound port
    assert len(s.db("SELECT id FROM assets WHERE job_id = ?", (job_id,))) == 1
    assert s.get(f"/v1/generation/assets/{st['outputs'][0]['id']}/content",
                 follow_redirects=True).status_code == 200


# -- final_committed -----------------------------------------------------------------------------
def _final_committed(s: Scenario, prompt: str, status: str, charged: Decimal, cancel: bool = False) -> None:
    tag = new_tag()
    s.start("final_committed")
    r = s.submit(f"{tag} {prompt}", webhook_url=s.rx.url(f"/ok/final/{tag}"))
    assert r.status_code == 202, r.text
    job_id = r.json()["request_id"]
    if cancel:
        s.wait_status(job_id, ("rendering",))
        s.expect_crash(lambda: s.post(f"/v1/generation/requests/{job_id}/cancel"))
    else:
        s.expect_crash()
    assert s.rx.count(f"/ok/final/{tag}") == 0  # the webhook was not sent before the crash
    s.restart()
    s.check(charged=charged)
    assert s.get(f"/v1/generation/requests/{job_id}/status").json()["status"] == status
    wait_until_sync(lambda: s.rx.count(f"/ok/final/{tag}") > 0, 15)
    assert s.rx.count(f"/ok/final/{tag}") == 1  # sent after the restart, exactly once
    assert [w["state"] for w in s.db("SELECT state FROM job_webhooks WHERE job_id = ?", (job_id,))] == ["delivered"]


@scenario("final_committed", "completed")
def final_committed_completed(s: Scenario) -> None:
    _final_committed(s, "done", "completed", Decimal("1.00"))


@scenario("final_committed", "failed")
def final_committed_failed(s: Scenario) -> None:
    _final_committed(s, "[[fail:upstream:502]]", "failed", Decimal(0))


@scenario("final_committed", "cancel_rendering")
def final_committed_cancel(s: Scenario) -> None:
    _final_committed(s, "[[delay:3]]", "canceled", Decimal(0), cancel=True)


# -- job_webhook_sending -------------------------------------------------------------------------
@scenario("job_webhook_sending")
def job_webhook_sending(s: Scenario) -> None:
    tag = new_tag()
    s.start("job_webhook_sending")
    r = s.submit(f"{tag} [[nsfw]]", webhook_url=s.rx.url(f"/ok/jobhook/{tag}"))
    assert r.status_code == 202, r.text
    job_id = r.json()["request_id"]
    s.expect_crash()
    s.restart()
    s.check()
    assert s.get(f"/v1/generation/requests/{job_id}/status").json()["status"] == "nsfw"
    rows = s.db("SELECT state FROM job_webhooks WHERE job_id = ?", (job_id,))
    assert [w["state"] for w in rows] == ["unknown"]  # may have gone out: never re-sent
    time.sleep(0.5)
    assert s.rx.count(f"/ok/jobhook/{tag}") <= 1


# -- delivery_sending ----------------------------------------------------------------------------
@scenario("delivery_sending")
def delivery_sending(s: Scenario) -> None:
    tag = new_tag()
    s.start("delivery_sending")
    r = s.post("/v1/webhooks", json={"url": s.rx.url(f"/ok/account/{tag}"), "events": ["api_key.created"]})
    assert r.status_code == 201, r.text
    hook_id = r.json()["webhook"]["id"] if "webhook" in r.json() else r.json()["data"]["id"]
    s.expect_crash(lambda: s.post("/v1/api-keys", json={"name": "first"}))
    s.restart()
    s.check()
    rows = s.db("SELECT status FROM webhook_deliveries WHERE webhook_id = ?", (hook_id,))
    assert [d["status"] for d in rows] == ["unknown"], rows
    time.sleep(0.5)
    assert s.rx.count(f"/ok/account/{tag}") <= 1  # 0 or 1, never 2
    before = s.rx.count(f"/ok/account/{tag}")
    assert s.post("/v1/api-keys", json={"name": "second"}).status_code == 201  # deliveries go on
    wait_until_sync(lambda: s.rx.count(f"/ok/account/{tag}") > before, 15)
    s.check()
    rows = s.db("SELECT status FROM webhook_deliveries WHERE webhook_id = ? ORDER BY seq", (hook_id,))
    assert [d["status"] for d in rows] == ["unknown", "delivered"]
    assert s.rx.count(f"/ok/account/{tag}") == before + 1


# -- mail_sending --------------------------------------------------------------------------------
@scenario("mail_sending")
def mail_sending(s: Scenario) -> None:
    """No SMTP host here (the mail would go to the log); tests/test_mail_crash.py is the same
    point against a real SMTP server."""
    s.start("mail_sending")
    org_id = s.org["organization_id"]
    s.expect_crash(lambda: s.post(f"/operator/v1/organizations/{org_id}/invitations", op=True,
                                  json={"email": "lost@crash.test", "role": "member"}))
    s.restart()
    s.check()
    rows = s.db("SELECT state, link FROM emails WHERE to_address = 'lost@crash.test'")
    assert rows == [{"state": "unknown", "link": None}]  # may have gone: never sent again
    r = s.post(f"/operator/v1/organizations/{org_id}/invitations", op=True,
               json={"email": "after@crash.test", "role": "member"})
    assert r.status_code == 201, r.text
    wait_until_sync(lambda: s.db("SELECT state FROM emails WHERE to_address = 'after@crash.test'")
                    == [{"state": "sent"}], 15)
    assert s.db("SELECT state FROM emails WHERE to_address = 'after@crash.test'") == [{"state": "sent"}]
    assert "mail (no SMTP host set, not sent) to lost@crash.test" not in s.node.log_tail(400)


# -- payment_verified ----------------------------------------------------------------------------
@scenario("payment_verified")
def payment_verified(s: Scenario) -> None:
    s.start("payment_verified")
    r = s.post("/v1/billing/topups", json={"credits": 300})
    assert r.status_code == 201, r.text
    topup_id = r.json()["data"]["topup"]["id"]
    s.expect_crash(lambda: s.post(f"/operator/v1/topups/{topup_id}/pay", op=True))
    s.restart()
    s.check(granted=SIGNUP + 300)
    assert len(s.db("SELECT id FROM credit_lots WHERE grant_id = ?", (topup_id,))) == 1
    r = s.post(f"/operator/v1/topups/{topup_id}/pay", op=True)  # paying again adds nothing
    assert r.status_code == 200 and r.json()["data"]["status"] == "paid", r.text
    s.check(granted=SIGNUP + 300)
    assert len(s.db("SELECT id FROM credit_lots WHERE grant_id = ?", (topup_id,))) == 1


# -- step_finished -------------------------------------------------------------------------------
@scenario("step_finished")
def step_finished(s: Scenario) -> None:
    s.start("step_finished")
    r = s.post("/v1/workflows/products/text-to-clip/runs", json={"inputs": {"prompt": "a step"}})
    assert r.status_code == 202, r.text
    run_id = r.json()["data"]["id"]
    s.expect_crash()
    s.restart()
    s.check(charged=Decimal("11.00"))
    run = s.get(f"/v1/workflows/runs/{run_id}").json()["data"]
    assert run["status"] == "completed" and run["credits"]["actual"] == "11.00", run
    jobs = s.db("SELECT status FROM jobs WHERE workflow_run_id = ?", (run_id,))
    assert [j["status"] for j in jobs] == ["completed", "completed"]


# -- upload_complete -----------------------------------------------------------------------------
@scenario("upload_complete")
def upload_complete(s: Scenario) -> None:
    s.start("upload_complete")
    data = png_bytes(1)
    s.expect_crash(lambda: s.upload(data))
    assert list((s.node.data_dir / "assets" / "tmp").iterdir())  # the complete file was left behind
    s.restart()
    s.check()  # I8: no file left in tmp, no asset row without its file
    assert s.db("SELECT id FROM assets") == []
    r = s.upload(data)
    assert r.status_code == 201, r.text
    s.check()
    assert len(s.db("SELECT id FROM assets")) == 1


# -- the tests -----------------------------------------------------------------------------------
def test_every_point_has_a_scenario():
    covered = {fn.point for fn in SCENARIOS.values()}
    assert covered == set(POINTS), f"points without a scenario: {set(POINTS) - covered}"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_crash_point(name, tmp_path, rx):
    s = Scenario(tmp_path, rx)
    try:
        SCENARIOS[name](s)
    finally:
        s.close()


# -- recovery beyond the points ------------------------------------------------------------------
def test_restart_with_more_rendering_jobs_than_slots(tmp_path, rx):
    """A stop between a render's slot release and its final commit (the window of
    `output_produced`) leaves more jobs `rendering` than the model has slots; after the
    restart the ones waiting in line must render when granted, not hold a slot forever.
    Found by the crash loop (seed 1): one job stayed `rendering` with its hold `held`."""
    s = Scenario(tmp_path, rx)
    try:
        s.start()
        ids = []
        for i in range(5):  # proc-image renders 2 at a time
            r = s.submit(f"line {i} [[delay:1.5]]")
            assert r.status_code == 202, r.text
            ids.append(r.json()["request_id"])
        wait_until_sync(lambda: len(s.db("SELECT id FROM jobs WHERE status = 'rendering'")) >= 2, 10)
        assert s.node.kill() == -9
        with closing(sqlite3.connect(s.node.db_path)) as conn:  # the node is down: the state it would leave
            conn.execute("UPDATE jobs SET status = 'rendering', started_at = created_at WHERE status = 'queued'")
            conn.commit()
        s.restart()
        s.check(charged=Decimal("5.00"), timeout=30)
        assert [s.get(f"/v1/generation/requests/{i}/status").json()["status"] for i in ids] == ["completed"] * 5
    finally:
        s.close()
