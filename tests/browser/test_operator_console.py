"""The operator console in a real browser, on a node of its own (its catalog file is edited
by the tests; one operator email listed): sign-in by token, every page (one h1, labels, no
serious axe finding, screenshots at desktop and phone width), approve, grant credits (and a
refused value), answer a ticket, cancel a job, retry a failed mail, a failed then a good
catalog reload, SIGHUP, a person who is not an operator, a listed person, a cross-site POST."""

from __future__ import annotations

import os
import re
import shutil
import signal
from pathlib import Path

import pytest
from playwright.sync_api import expect
from waiting import wait_until_sync

from tests.browser.support import OPERATOR, accept_invitation, check_page, start_node

OPS_EMAIL = "ops@example.test"
FORGED = "This form was not sent from this site, or the page was open too long."
DEFAULT_CATALOG = Path(__file__).resolve().parents[2] / "service" / "catalog" / "default.toml"


def reloaded_until(page, shown) -> bool:
    """True once `shown()` is; else the page is reloaded for the next look (a server-side
    change that no event announces to the page)."""
    if shown():
        return True
    page.reload()
    return False


@pytest.fixture(scope="module")
def console(tmp_path_factory, oidc_issuer, tls_ca, smtp):
    tmp = tmp_path_factory.mktemp("console-node")
    tls_ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    catalog = tmp / "catalog.toml"
    shutil.copy(DEFAULT_CATALOG, catalog)
    env = {f"GENSERVICE_{k.upper()}": str(v) for k, v in smtp.settings().items()}
    env |= {"GENSERVICE_CATALOG_FILE": str(catalog), "GENSERVICE_OPERATOR_EMAILS": OPS_EMAIL}
    with start_node(tmp, oidc_issuer, tmp / "ca.pem", env) as n:
        n.catalog = catalog
        yield n


@pytest.fixture(scope="module")
def signed_in(browser, console):
    """Signed in once for the module (sign-ins are throttled per address like logins)."""
    context = browser.new_context(base_url=console.url)
    page = context.new_page()
    page.goto("/operator")
    page.wait_for_url(re.compile(r"/operator/login\?next=/operator$"))
    page.get_by_label("Operator token").fill(OPERATOR)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/operator$"))
    state = context.storage_state()
    context.close()
    return state


@pytest.fixture
def op_page(browser, console, signed_in):
    context = browser.new_context(base_url=console.url, storage_state=signed_in)
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto("/operator")
    yield page
    context.close()


def row(page, text: str):
    return page.locator("tr", has_text=text)


def test_a_wrong_token_is_refused_and_the_sign_in_page_is_accessible(browser, console):
    context = browser.new_context(base_url=console.url)
    page = context.new_page()
    try:
        page.goto("/operator/organizations")
        page.wait_for_url(re.compile(r"/operator/login\?next=/operator/organizations$"))
        check_page(page, "operator-login")
        page.get_by_label("Operator token").fill("wrong")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_have_text("That is not the operator token.")
        page.get_by_label("Operator token").fill(OPERATOR)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(re.compile(r"/operator/organizations$"))
    finally:
        context.close()


def test_every_console_page_passes_its_checks(op_page, console):
    pending = console.op("POST", "/organizations", {"name": "Shot Pending", "owner_email": "shot@example.test",
                                                     "approved": False}).json()["data"]
    page = op_page
    for path, name in (("/operator", "overview"), ("/operator/organizations", "organizations"),
                       (f"/operator/organizations/{pending['organization_id']}", "organization"),
                       ("/operator/support", "support"), ("/operator/engines", "engines"),
                       ("/operator/jobs", "jobs"), ("/operator/catalog", "catalog"), ("/operator/mail", "mail"),
                       ("/operator/audit", "audit")):
        page.goto(path)
        check_page(page, f"operator-{name}")


def test_approve_then_grant_credits_with_a_refused_value_first(op_page, console):
    org = console.op("POST", "/organizations", {"name": "Waiting Browser Co", "owner_email": "wb@example.test",
                                                 "approved": False}).json()["data"]
    page = op_page
    page.get_by_role("link", name=re.compile("sign-ups waiting")).click()
    page.wait_for_url(re.compile(r"status=pending"))
    row(page, "Waiting Browser Co").get_by_role("button", name="Approve").click()
    expect(page.get_by_role("status")).to_contain_text("Organization approved")
    page.get_by_label("Search").fill("Waiting Browser")
    page.get_by_label("Status").select_option("")
    page.get_by_role("button", name="Filter").click()
    row(page, "Waiting Browser Co").get_by_role("link", name="Waiting Browser Co").click()
    page.wait_for_url(re.compile(org["organization_id"]))
    page.get_by_label("Credits").fill("-3")
    page.get_by_label("Reason").fill("goodwill")
    page.get_by_role("button", name="Grant credits").click()
    expect(page.locator("#grant-error")).to_contain_text("Credits: enter a number above zero")
    check_page(page, "operator-grant-refused")
    page.get_by_label("Credits").fill("25")
    page.get_by_role("button", name="Grant credits").click()
    expect(page.get_by_role("status")).to_have_text("Credits granted.")
    expect(page.get_by_role("main")).to_contain_text("225.00 credits")
    page.goto("/operator/audit")
    expect(row(page, "credits.grant")).to_contain_text("25.00 credits")
    expect(row(page, "organization.approve")).to_contain_text(org["organization_id"])


def test_a_ticket_is_answered_and_a_failed_mail_retried(op_page, console, smtp):
    org = console.new_org()
    owner = f"owner-{org['tag']}@example.test"
    r = console.api("POST", "/v1/support/tickets", org["api_key"],
                    json={"subject_line": f"Help {org['tag']}", "body": "Renders fail at 2k."})
    assert r.status_code == 201, r.text
    smtp.refuse(owner, ["550 5.1.1 mailbox unavailable"])
    page = op_page
    page.goto("/operator/support")
    page.get_by_role("link", name=re.compile(f"Help {org['tag']}")).click()
    page.get_by_label("Reply").fill("Fixed on our side, please try again.")
    page.get_by_role("button", name="Send reply").click()
    expect(page.get_by_role("status")).to_have_text("Reply sent.")
    expect(page.locator("ol.thread")).to_contain_text("Fixed on our side")
    check_page(page, "operator-ticket")
    page.goto("/operator/mail?state=failed")
    wait_until_sync(lambda: reloaded_until(page, lambda: row(page, owner).count()), 20, every=0.3)
    expect(row(page, owner)).to_contain_text("550")
    row(page, owner).get_by_role("button", name="Retry").click()
    expect(page.get_by_role("status")).to_have_text("Mail queued to be sent again.")
    wait_until_sync(lambda: smtp.messages(owner), 20, every=0.2)
    assert "Fixed on our side" in str(smtp.messages(owner)[-1])


def test_a_running_job_is_canceled(op_page, console):
    org = console.new_org("10")
    r = console.api("POST", "/v1/generation/models/proc-image", org["api_key"], json={"prompt": "slow [[delay:600]]"})
    job_id = r.json()["request_id"]
    page = op_page
    page.goto("/operator/jobs")
    row(page, job_id).get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("status")).to_contain_text("Job canceled")
    expect(row(page, job_id)).to_have_count(0)
    status = console.api("GET", f"/v1/generation/requests/{job_id}/status", org["api_key"]).json()
    assert status["status"] == "canceled"
    balance = console.api("GET", "/v1/billing/balance", org["api_key"]).json()["data"]
    assert balance["available"] == "210.00"  # the signup lot and the grant, the hold released


def test_a_failed_reload_keeps_the_catalog_and_a_good_one_and_sighup_replace_it(op_page, console):
    original = console.catalog.read_text()
    page = op_page
    try:
        console.catalog.write_text(original.replace('backend = "procedural_image"', 'backend = "no_such"'))
        page.goto("/operator/catalog")
        page.get_by_role("button", name="Reload catalog").click()
        expect(page.get_by_role("alert")).to_contain_text("unknown backend 'no_such'")
        expect(row(page, "proc-image")).to_contain_text("1k: 1.00")
        check_page(page, "operator-catalog-refused")
        console.catalog.write_text(original.replace('credits = "1.00"', 'credits = "1.50"', 1))
        page.get_by_role("button", name="Reload catalog").click()
        expect(page.get_by_role("status")).to_contain_text("Catalog reloaded")
        expect(row(page, "proc-image")).to_contain_text("1k: 1.50")
        console.catalog.write_text(original.replace('credits = "1.00"', 'credits = "1.75"', 1))
        os.kill(console.proc.pid, signal.SIGHUP)
        wait_until_sync(lambda: reloaded_until(page, lambda: "1k: 1.75" in page.content()), 20, every=0.3)
        expect(row(page, "proc-image")).to_contain_text("1k: 1.75")
    finally:
        console.catalog.write_text(original)
        console.op("POST", "/catalog/reload")


def test_a_person_who_is_not_an_operator_is_refused_and_a_listed_one_gets_in(browser, console):
    org = console.new_org()
    for email, allowed in ((f"member-{org['tag']}@example.test", False), (OPS_EMAIL, True)):
        context = browser.new_context(base_url=console.url)
        page = context.new_page()
        try:
            accept_invitation(page, console.invite(org["organization_id"], email, "member"))
            response = page.goto("/operator")
            if allowed:
                assert response.status == 200
                expect(page.get_by_role("heading", level=1)).to_have_text("Overview")
                expect(page.locator("header")).to_contain_text(OPS_EMAIL)
            else:
                assert response.status == 403
                expect(page.get_by_role("alert")).to_contain_text("not an operator of this node")
        finally:
            context.close()


def test_a_cross_site_post_is_refused(op_page, console):
    org = console.op("POST", "/organizations", {"name": "Cross Site Co", "owner_email": "cs@example.test",
                                                 "approved": False}).json()["data"]
    page = op_page
    page.goto("/operator/organizations")
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    path = f"/operator/organizations/{org['organization_id']}/approve"
    r = page.request.post(path, form={"csrf_token": token}, headers={"Origin": "https://evil.example"})
    assert r.status == 403 and FORGED in r.text()
    r = page.request.post(path, form={"csrf_token": "forged"})
    assert r.status == 403
    listed = console.op("GET", "/organizations?status=pending").json()["data"]
    assert org["organization_id"] in [o["organization_id"] for o in listed]
