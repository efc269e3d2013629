"""The operator console's actions without a browser: approve, grant credits (and every refused
value, with the field named), resend an invitation, answer a ticket (its mail), cancel a
job (credits released), retry a failed mail; an action on a missing object is a 404 page."""

from __future__ import annotations

import pytest

from service.storage import mail as mail_sql
from tests.pages import page
from tests.test_operator_console import console_form, sign_in

CREDITS_ERROR = "Credits: enter a number above zero with at most two decimals, such as 25 or 12.50."
REASON_ERROR = "Reason: say why these credits are granted (up to 500 characters)."

pytestmark = pytest.mark.usefixtures("cheap_hashes")


def available(node, org_id: str) -> str:
    from service.storage import billing

    return billing.balance(node.store, org_id, node.clock.now())["available"]


async def audit_actions(node) -> list[tuple]:
    return [(r["action"], r["target"]) for r in node.store.all(
        "SELECT action, target FROM operator_audit WHERE action != 'sign_in' AND who != 'operator API' ORDER BY seq")]


async def test_a_pending_sign_up_is_approved_from_the_list(node):
    org = await node.create_org(name="Waiting Co", email="w@acme.test", approved=False)
    await node.create_org(name="Approved Co", email="a@acme.test")
    await sign_in(node.client)
    _, html = await page(node.client, "/operator/organizations?status=pending")
    assert "Waiting Co" in html and "Approved Co" not in html and ">Approve</button>" in html
    _, html = await page(node.client, "/operator")
    assert '<strong>1</strong>sign-ups waiting' in html
    oid = org["organization_id"]
    r = await console_form(node.client, f"/operator/organizations/{oid}/approve", {})
    assert r.status_code == 303 and r.headers["Location"] == "/operator/organizations?note=approved"
    assert available(node, oid) == "200.00"
    _, html = await page(node.client, "/operator/organizations?q=waiting")
    assert "Waiting Co" in html and ">Approve</button>" not in html and "200.00" in html
    assert await audit_actions(node) == [("organization.approve", oid)]


async def test_unknown_filters_and_missing_objects_are_pages_not_500s(node):
    await sign_in(node.client)
    r = await node.client.get("/operator/organizations?status=frozen")
    assert r.status_code == 400
    assert "Status: choose one of unconfirmed, pending, approved, or all." in await r.get_data(as_text=True)
    for path in ("/operator/organizations/nope", "/operator/support/nope"):
        r = await node.client.get(path)
        assert r.status_code == 404, path
    for path, message in (("/operator/organizations/nope/approve", "There is no organization with this id."),
                          ("/operator/organizations/nope/grants", "There is no organization with this id."),
                          ("/operator/jobs/nope/cancel", "There is no job with this id."),
                          ("/operator/mail/nope/retry", "There is no mail with this id."),
                          ("/operator/support/nope/replies", "There is no ticket with this id.")):
        r = await console_form(node.client, path, {"credits": "1", "reason": "x", "body": "hi"})
        html = await r.get_data(as_text=True)
        assert r.status_code == 404 and message in html and "<h1>Not found</h1>" in html, path
    assert await audit_actions(node) == []


@pytest.mark.parametrize("credits", ["-5", "0", "abc", "1.234", "", "1e3", "NaN", "99999999999999999"])
async def test_a_grant_refuses_bad_credits_naming_the_field(node, credits):
    org = await node.create_org(name="Grantee", email="g@acme.test")
    await sign_in(node.client)
    oid = org["organization_id"]
    r = await console_form(node.client, f"/operator/organizations/{oid}/grants",
                           {"credits": credits, "reason": "goodwill"})
    html = await r.get_data(as_text=True)
    assert r.status_code == 400 and CREDITS_ERROR in html
    assert 'id="grant-credits" name="credits" inputmode="decimal" required' in html and 'aria-invalid="true"' in html
    assert available(node, oid) == "200.00" and await audit_actions(node) == []


async def test_a_grant_needs_a_reason_and_then_adds_a_lot(node):
    org = await node.create_org(name="Grantee", email="g@acme.test")
    await sign_in(node.client)
    oid = org["organization_id"]
    r = await console_form(node.client, f"/operator/organizations/{oid}/grants", {"credits": "12.5", "reason": "  "})
    assert r.status_code == 400 and REASON_ERROR in await r.get_data(as_text=True)
    r = await console_form(node.client, f"/operator/organizations/{oid}/grants",
                           {"credits": "12.5", "reason": "outage on the 3rd"})
    assert r.status_code == 303 and r.headers["Location"] == f"/operator/organizations/{oid}?note=granted"
    assert available(node, oid) == "212.50"
    _, html = await page(node.client, f"/operator/organizations/{oid}?note=granted")
    assert "Credits granted." in html and "outage on the 3rd" in html and "212.50 credits" in html
    assert "g@acme.test" in html and "Default" in html and "No credits used in the last 30 days." in html
    assert await audit_actions(node) == [("credits.grant", oid)]


async def test_an_invitation_is_resent_with_a_new_link(node):
    org = await node.create_org(name="Inviter", email="i@acme.test")
    oid = org["organization_id"]
    r = await node.op("POST", f"/organizations/{oid}/invitations", {"email": "new@acme.test", "role": "member"})
    inv = (await r.get_json())["data"]
    await sign_in(node.client)
    _, html = await page(node.client, f"/operator/organizations/{oid}")
    assert "new@acme.test" in html and ">Resend</button>" in html
    r = await console_form(node.client, f"/operator/organizations/{oid}/invitations/{inv['invitation_id']}/resend", {})
    assert r.status_code == 303
    r = await node.op("POST", "/invitations/accept", {"token": inv["token"]})
    assert r.status_code == 400 or r.status_code == 404 or r.status_code == 422  # the old link stopped working
    assert await audit_actions(node) == [("invitation.resend", oid)]
    r = await console_form(node.client, f"/operator/organizations/{oid}/invitations/nope/resend", {})
    assert r.status_code == 404


async def test_a_ticket_is_answered_and_its_opener_mailed(node, org):
    r = await node.call("POST", "/v1/support/tickets", org["api_key"],
                        json={"subject_line": "Cannot render", "body": "It fails at 2k."})
    ticket = (await r.get_json())["data"]
    await sign_in(node.client)
    _, html = await page(node.client, "/operator/support")
    assert "Cannot render" in html
    tid = ticket["id"]
    _, html = await page(node.client, f"/operator/support/{tid}")
    assert '<label for="reply-body">Reply</label>' in html and ">Send reply</button>" in html
    r = await console_form(node.client, f"/operator/support/{tid}/replies", {"body": "   "})
    assert r.status_code == 400 and "Reply: write the answer" in await r.get_data(as_text=True)
    r = await console_form(node.client, f"/operator/support/{tid}/replies", {"body": "Fixed, try again."})
    assert r.status_code == 303
    row = node.store.one("SELECT state FROM support_tickets WHERE id = ?", (tid,))
    assert row["state"] == "awaiting_customer"
    mails = node.store.all("SELECT to_address, body FROM emails WHERE kind LIKE 'support%'")
    assert len(mails) == 1 and "Fixed, try again." in mails[0]["body"]
    _, html = await page(node.client, f"/operator/support/{tid}")
    assert "Fixed, try again." in html and "Reply sent." not in html
    assert await audit_actions(node) == [("ticket.reply", tid)]


async def test_a_job_is_canceled_and_its_credits_released(node, org):
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", org["api_key"],
                        json={"prompt": "a slow hill [[delay:3600]]"})
    job_id = (await r.get_json())["request_id"]
    before = available(node, org["organization_id"])
    await sign_in(node.client)
    _, html = await page(node.client, "/operator/jobs")
    assert job_id in html and ">Cancel</button>" in html
    r = await console_form(node.client, f"/operator/jobs/{job_id}/cancel", {})
    assert r.status_code == 303 and r.headers["Location"] == "/operator/jobs?note=canceled"
    assert node.store.scalar("SELECT status FROM jobs WHERE id = ?", (job_id,)) == "canceled"
    from tests.conftest import until

    await until(lambda: available(node, org["organization_id"]) == "200.00")
    assert before == "199.00"
    assert await audit_actions(node) == [("job.cancel", job_id)]


async def test_a_failed_mail_is_retried_and_a_lost_link_is_not(node):
    now_iso = node.clock.iso_now()

    def failed(conn):
        plain = mail_sql.enqueue(conn, None, "a@acme.test", "notice", "Hello", "Hi there", None, now_iso)
        linked = mail_sql.enqueue(conn, None, "b@acme.test", "reset", "Reset", "Go: \u27e6link\u27e7", None, now_iso,
                                  link="sealed")
        for mid in (plain, linked):
            mail_sql.mark_failed(conn, mid, now_iso, "550 mailbox unavailable")
        sent = mail_sql.enqueue(conn, None, "c@acme.test", "notice", "Done", "ok", None, now_iso)
        mail_sql.mark_sent(conn, sent, now_iso)
        return plain, linked, sent

    plain, linked, sent = await node.store.write(failed)
    await sign_in(node.client)
    _, html = await page(node.client, "/operator/mail?state=failed")
    assert "550 mailbox unavailable" in html and "link discarded" in html and html.count(">Retry</button>") == 1
    r = await console_form(node.client, f"/operator/mail/{linked}/retry", {})
    assert r.status_code == 409 and "one-time link that was discarded" in await r.get_data(as_text=True)
    r = await console_form(node.client, f"/operator/mail/{sent}/retry", {})
    assert r.status_code == 409 and "Only a mail that failed can be sent again." in await r.get_data(as_text=True)
    r = await console_form(node.client, f"/operator/mail/{plain}/retry", {})
    assert r.status_code == 303
    assert node.store.scalar("SELECT state FROM emails WHERE id = ?", (plain,)) in ("pending", "sending", "sent")
    assert await audit_actions(node) == [("mail.retry", plain)]
    r = await node.client.get("/operator/mail?state=nope")
    assert r.status_code == 400


async def test_the_usage_chart_shows_credits_captured_per_day(node, org):
    r = await node.call("POST", "/v1/generation/models/proc-image", org["api_key"], json={"prompt": "a quick hill"})
    job_id = (await r.get_json())["request_id"]
    from tests.conftest import until

    await until(lambda: node.store.scalar("SELECT hold_settled FROM jobs WHERE id = ?", (job_id,)) == 1)
    await sign_in(node.client)
    _, html = await page(node.client, f"/operator/organizations/{org['organization_id']}")
    day = node.clock.iso_now()[:10]
    assert '<svg class="chart"' in html and f"<title>{day}: 1.00 credits</title>" in html
    assert 'y="0" width="8" height="100"' in html  # the one day with usage is the tallest bar
