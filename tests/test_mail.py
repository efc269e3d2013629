"""The mail outbox against a real SMTP server (tests/smtp_server.py): the mails of
invitations, low balance and support replies; temporary refusals retried with backoff and a
permanent one recorded (on trio's mock clock); a mail in flight at a stop never sent twice;
no SMTP host: mails in the log with their link; the SMTP password in no log, no row."""

from __future__ import annotations

import logging

import pytest

from conftest import START, outboxes_settled, start_node, stop_node
from service.mail import messages, outbox
from service.storage import mail as mail_sql
from smtp_server import PASSWORD, free_port, html_part, link_in, text_part, wait_until
from waiting import settle


def mail_rows(node, to):
    return node.store.all("SELECT * FROM emails WHERE to_address = ? ORDER BY created_at, id", (to,))


def one_row(node, to):
    rows = mail_rows(node, to)
    return rows[0] if len(rows) == 1 else None


async def invite(node, org_id, email, role="member"):
    r = await node.op("POST", f"/organizations/{org_id}/invitations", {"email": email, "role": role})
    assert r.status_code == 201
    return (await r.get_json())["data"]


def test_message_parts_and_headers():
    mail = messages.invitation("Acme <&>", "admin", 14)
    row = {"id": "6b0c1d7e-0000-4000-8000-000000000001", "to_address": "x@mail.test", "subject": mail.subject,
           "body": mail.text, "html": mail.html}
    msg = messages.build(row, "https://node.test/invitations/accept?token=a&b", "genservice@node.test",
                         START)
    assert msg["Message-ID"] == "<6b0c1d7e-0000-4000-8000-000000000001@node.test>"
    assert msg["Date"].datetime.timestamp() == START and msg["Date"].datetime.utcoffset().total_seconds() == 0
    assert (msg["From"], msg["To"], msg["Subject"]) == ("genservice@node.test", "x@mail.test",
                                                        "You are invited to join Acme <&> on genservice")
    assert msg.get_content_type() == "multipart/alternative"
    assert "https://node.test/invitations/accept?token=a&b" in text_part(msg)
    assert 'href="https://node.test/invitations/accept?token=a&amp;b"' in html_part(msg)
    assert "Acme &lt;&amp;&gt;" in html_part(msg) and messages.LINK not in msg.as_string()


async def test_invitation_mail_and_resend(mail_node, smtp):
    node, to = mail_node, "invitee@mail.test"
    org = await node.create_org()
    inv = await invite(node, org["organization_id"], to, "admin")
    [first] = await smtp.wait_for(to)
    assert first["Subject"] == "You are invited to join Acme on genservice"
    assert "as admin" in text_part(first) and "valid 14 days" in text_part(first)
    link = link_in(first, "http://testserver/invitations/accept?token=")
    assert link == f"http://testserver/invitations/accept?token={inv['token']}"
    r = await node.op("POST", f"/organizations/{org['organization_id']}/invitations/{inv['invitation_id']}/resend")
    again = (await r.get_json())["data"]
    second = (await smtp.wait_for(to, 2))[1]
    assert link_in(second, "http://testserver/invitations/accept?token=").endswith(again["token"])
    assert (await node.client.get(link.removeprefix("http://testserver"))).status_code == 404
    r = await node.client.get(f"/invitations/accept?token={again['token']}")
    assert r.status_code == 200 and "Join Acme" in await r.get_data(as_text=True)
    row = mail_rows(node, to)[0]
    assert row["state"] == "sent" and row["link"] is None and row["kind"] == "invitation"


async def test_invitation_link_valid_14_days(mail_node, smtp, mock_clock):
    node, to = mail_node, "fortnight@mail.test"
    org = await node.create_org()
    await invite(node, org["organization_id"], to)
    path = link_in((await smtp.wait_for(to))[0], "http://testserver/").removeprefix("http://testserver")
    node.clock.advance(14 * 86400 - 1)
    assert (await node.client.get(path)).status_code == 200
    node.clock.advance(1)
    assert (await node.client.get(path)).status_code == 404


async def test_low_balance_mail_to_owners_and_admins(mail_node, smtp):
    node = mail_node
    org = await node.create_org(email="low-owner@mail.test")
    oid = org["organization_id"]
    await node.add_member(oid, "admin", "low-admin@mail.test")
    await node.add_member(oid, "member", "low-member@mail.test")
    r = await node.call("PUT", "/v1/billing/settings", org["api_key"], json={"low_balance_threshold": "500.00"})
    assert r.status_code == 200
    for to in ("low-owner@mail.test", "low-admin@mail.test"):
        [mail] = await smtp.wait_for(to)
        assert mail["Subject"] == "Your credit balance is low"
        assert "The available credits of \u201cAcme\u201d (200.00) fell below your low-balance threshold (500.00)." \
            in text_part(mail)
    await outboxes_settled(node, real_time=True)  # every mail of the crossing has gone
    assert smtp.messages("low-member@mail.test") == []
    assert len(smtp.messages("low-owner@mail.test")) == 1  # once per crossing


async def test_support_reply_mail(mail_node, smtp):
    node = mail_node
    org = await node.create_org(email="asker@mail.test")
    r = await node.call("POST", "/v1/support/tickets", org["api_key"],
                        json={"subject_line": "Slow renders", "body": "Why?"})
    ticket = (await r.get_json())["data"]
    r = await node.op("POST", f"/support/tickets/{ticket['id']}/replies", {"body": "Fixed now.", "author": "Sam"})
    assert r.status_code == 201, await r.get_data(as_text=True)
    [mail] = await smtp.wait_for("asker@mail.test")
    assert mail["Subject"] == f"Re: [#{ticket['number']}] Slow renders"
    assert "Sam replied" in text_part(mail) and "Fixed now." in text_part(mail)


async def test_temporary_refusal_retried_with_backoff(mail_node, smtp, mock_clock):
    node, to = mail_node, "retry@mail.test"
    smtp.refuse(to, ["451 4.3.0 Try again later", "451 4.3.0 Try again later"])
    org = await node.create_org()
    await invite(node, org["organization_id"], to)
    await wait_until(lambda: (one_row(node, to) or {}).get("error") is not None)
    row = one_row(node, to)
    assert (row["state"], row["attempts"], row["next_attempt_at"]) == ("pending", 1, START + 60)
    assert row["error"] == "SMTP 451: 4.3.0 Try again later"
    assert row["link"].startswith("v1:")  # the link waits sealed, never in clear
    node.clock.advance(59)
    await settle()  # the dispatcher has looked at the new time
    await outboxes_settled(node, real_time=True)
    assert one_row(node, to)["attempts"] == 1 and smtp.refused(to) == 1
    node.clock.advance(1)
    await wait_until(lambda: one_row(node, to)["attempts"] == 2 and one_row(node, to)["state"] == "pending")
    assert one_row(node, to)["next_attempt_at"] == START + 60 + 300
    node.clock.advance(300)
    [mail] = await smtp.wait_for(to)
    await wait_until(lambda: one_row(node, to)["state"] == "sent")
    row = one_row(node, to)
    assert row["attempts"] == 3 and row["link"] is None and row["error"] is None and smtp.refused(to) == 2


async def test_permanent_refusal_recorded(mail_node, smtp, mock_clock):
    node, to = mail_node, "gone@mail.test"
    smtp.refuse(to, ["550 5.1.1 Mailbox unavailable", "550 5.1.1 Mailbox unavailable"])
    org = await node.create_org()
    await invite(node, org["organization_id"], to)
    await wait_until(lambda: (one_row(node, to) or {}).get("state") == "failed")
    row = one_row(node, to)
    assert (row["attempts"], row["error"], row["link"]) == (1, "SMTP 550: 5.1.1 Mailbox unavailable", None)
    node.clock.advance(86400)
    await settle()
    await outboxes_settled(node, real_time=True)
    assert one_row(node, to)["attempts"] == 1 and smtp.refused(to) == 1


async def test_connection_refused_retried_then_given_up(nursery, tmp_path, smtp, mock_clock):
    port = free_port()  # nothing listens there
    node = await start_node(nursery, tmp_path, **smtp.settings(smtp_port=port))
    to = "unreachable@mail.test"
    org = await node.create_org()
    await invite(node, org["organization_id"], to)
    for attempt, wait in enumerate(outbox.BACKOFF, start=1):
        await wait_until(lambda a=attempt: (one_row(node, to)["attempts"], one_row(node, to)["state"]) == (a, "pending"))
        row = one_row(node, to)
        assert row["state"] == "pending" and row["error"] == f"connection refused by 127.0.0.1:{port}"
        node.clock.advance(wait)
    await wait_until(lambda: one_row(node, to)["state"] == "failed")
    assert one_row(node, to)["error"] == f"gave up after 9 attempts: connection refused by 127.0.0.1:{port}"
    await stop_node(node)


async def test_mail_in_flight_at_a_stop_is_not_sent_again(nursery, tmp_path, smtp):
    node = await start_node(nursery, tmp_path, **smtp.settings())
    now = node.clock.iso_now()
    later = node.clock.now() + 3600

    def queue(conn):
        # as the dispatcher leaves them at a crash: one claimed (`sending`, the SMTP
        # conversation maybe done), one waiting for a retry
        mail_sql.enqueue(conn, None, "inflight@mail.test", "notice", "In flight", "text", None, now)
        mail_sql.claim_due(conn, float("inf"), 1)
        mail_sql.enqueue(conn, None, "waiting@mail.test", "notice", "Waiting", "text", None, now)
        conn.execute("UPDATE emails SET next_attempt_at = ? WHERE to_address = 'waiting@mail.test'", (later,))

    await node.store.write(queue)
    assert one_row(node, "inflight@mail.test")["state"] == "sending"
    await stop_node(node)

    node = await start_node(nursery, tmp_path / "", **smtp.settings())  # the restart
    row = one_row(node, "inflight@mail.test")
    assert row["state"] == "unknown" and "not sent again" in row["error"]
    node.clock.advance(3600)
    await smtp.wait_for("waiting@mail.test")
    await outboxes_settled(node, real_time=True)
    assert smtp.messages("inflight@mail.test") == []
    assert one_row(node, "inflight@mail.test")["state"] == "unknown"
    await stop_node(node)


async def test_without_smtp_mails_go_to_the_log(node, caplog):
    caplog.set_level(logging.INFO, logger="service.mail")
    org = await node.create_org()
    inv = await invite(node, org["organization_id"], "logged@mail.test")
    await wait_until(lambda: (one_row(node, "logged@mail.test") or {}).get("state") == "sent")
    line = next(r.getMessage() for r in caplog.records if "logged@mail.test" in r.getMessage())
    assert line == ("mail (no SMTP host set, not sent) to logged@mail.test: You are invited to join Acme on "
                    f"genservice | link: http://testserver/invitations/accept?token={inv['token']}")


async def test_smtp_password_never_logged_or_stored(nursery, tmp_path, smtp, caplog):
    caplog.set_level(logging.DEBUG)
    node = await start_node(nursery, tmp_path, **smtp.settings(smtp_password="wrong-" + PASSWORD))
    org = await node.create_org()
    await invite(node, org["organization_id"], "auth@mail.test")
    await wait_until(lambda: (one_row(node, "auth@mail.test") or {}).get("state") == "failed")
    assert one_row(node, "auth@mail.test")["error"].startswith("SMTP 535: ")
    await stop_node(node)
    settings = node.parts.settings
    assert PASSWORD not in caplog.text and PASSWORD not in repr(settings)
    assert PASSWORD not in repr(outbox.smtp_config(settings))
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("genservice.db*"))
    assert PASSWORD.encode() not in raw


@pytest.mark.parametrize("answer, temporary", [("421 4.7.0 busy", True), ("452 4.2.2 full", True),
                                               ("554 5.7.1 rejected", False), ("552 5.3.4 too big", False)])
async def test_answers_classified(mail_node, smtp, mock_clock, answer, temporary):
    to = f"class-{answer[:3]}@mail.test"
    smtp.refuse(to, [answer])
    org = await mail_node.create_org()
    await invite(mail_node, org["organization_id"], to)
    await wait_until(lambda: (one_row(mail_node, to) or {}).get("error") is not None)
    row = one_row(mail_node, to)
    assert row["state"] == ("pending" if temporary else "failed")
    assert row["error"] == f"SMTP {answer[:3]}: {answer[4:]}"


def test_default_sender_address():
    from service.config import Settings

    assert outbox.sender_address(Settings()) == "genservice@127.0.0.1"
    assert outbox.sender_address(Settings(base_url="https://gen.example.com")) == "genservice@gen.example.com"
    assert outbox.sender_address(Settings(mail_from="Gen <noreply@example.com>")) == "Gen <noreply@example.com>"


@pytest.mark.parametrize("security", ["tls", "none"])
async def test_implicit_tls_and_plain_servers(nursery, tmp_path, security):
    """GENSERVICE_SMTP_SECURITY=tls (implicit TLS, AUTH) and none (plain, no login), each
    against its own short-lived aiosmtpd (the shared one speaks STARTTLS)."""
    from smtp_server import SmtpServer

    server = SmtpServer(tmp_path, security).start()
    try:
        node = await start_node(nursery, tmp_path, **server.settings())
        org = await node.create_org()
        await invite(node, org["organization_id"], f"{security}@mail.test")
        [mail] = await server.wait_for(f"{security}@mail.test")
        assert mail["Subject"] == "You are invited to join Acme on genservice"
        # the login went inside the TLS session (aiosmtpd marks only its own STARTTLS as TLS;
        # a client speaking TLS to a plain listener, or plain text to this one, gets nothing)
        assert [login for login, _ in server.handler.logins] == (["mailer"] if security == "tls" else [])
        await stop_node(node)
    finally:
        server.stop()


async def test_untrusted_certificate_is_a_temporary_failure(nursery, tmp_path, smtp, mock_clock):
    node = await start_node(nursery, tmp_path, **smtp.settings(smtp_ca_file=None))
    org = await node.create_org()
    await invite(node, org["organization_id"], "untrusted@mail.test")
    await wait_until(lambda: (one_row(node, "untrusted@mail.test") or {}).get("error") is not None)
    row = one_row(node, "untrusted@mail.test")
    assert row["state"] == "pending" and row["error"].startswith("TLS with the SMTP server failed: ")
    assert "CERTIFICATE_VERIFY_FAILED" in row["error"] and smtp.messages("untrusted@mail.test") == []
    await stop_node(node)


async def test_more_mails_than_slots_all_go_once(mail_node, smtp):
    org = await mail_node.create_org()
    count = outbox.CONCURRENCY * 3 + 1
    for i in range(count):
        await invite(mail_node, org["organization_id"], f"many{i}@mail.test")
    for i in range(count):
        await smtp.wait_for(f"many{i}@mail.test")
    await wait_until(lambda: mail_node.store.scalar("SELECT count(*) FROM emails WHERE state = 'sent'") == count)
    assert all(len(smtp.messages(f"many{i}@mail.test")) == 1 for i in range(count))
