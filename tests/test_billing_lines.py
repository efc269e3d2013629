"""The Billing page's ledger lines: a job's hold and capture fold into "charged N credits"."""

from service.views.billing_lines import lines, signed
from decimal import Decimal


def row(kind, amount, job=None, run=None, at="2026-01-01T10:00:00Z", rid="r"):
    return {"id": rid, "kind": kind, "amount": amount, "job_id": job, "workflow_run_id": run, "created_at": at,
            "project_id": "p", "description": None}


def test_a_captured_job_is_one_line_with_what_it_cost():
    rows = [row("capture", "1.00", job="j1", at="2026-01-01T10:01:00Z"), row("hold", "-2.00", job="j1"),
            row("grant", "100.00", rid="g")]
    out = lines(rows)
    assert [(x["what"], x["signed"]) for x in out] == [("charged 1.00 credits", "−1.00 credits"),
                                                        ("grant", "+100.00 credits")]
    assert out[0]["created_at"] == "2026-01-01T10:01:00Z"


def test_a_zero_capture_reads_as_the_whole_hold_charged():
    out = lines([row("capture", "0.00", job="j"), row("hold", "-1.00", job="j")])
    assert [(x["what"], x["signed"]) for x in out] == [("charged 1.00 credits", "−1.00 credits")]


def test_released_and_running_jobs_and_runs():
    out = lines([row("release", "3.00", run="w"), row("hold", "-3.00", run="w"), row("hold", "-0.50", job="k")])
    assert [(x["owner"], x["what"], x["signed"]) for x in out] == [
        ("run", "nothing charged (held credits released)", "0.00 credits"),
        ("job", "0.50 credits held while it runs", "−0.50 credits")]


def test_signed_amounts_carry_their_unit():
    assert signed(Decimal("2.5")) == "+2.50 credits" and signed(Decimal("-1")) == "−1.00 credits"
