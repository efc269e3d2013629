"""A subject built from text people typed (a ticket subject, a project or key name) can hold
a line break; the mail still goes out, through the real SMTP peer, with a one-line Subject
and no header of the attacker's."""

from __future__ import annotations

from conftest import outboxes_settled
from service.mail import messages
from service.storage import mail as mail_sql


def test_subject_line_breaks_folded():
    mail = messages.support_reply(7, "help\r\nBcc: victim@mail.test\u2028X-Evil: 1", "Ops", "body")
    row = {"id": "6b0c1d7e-0000-4000-8000-000000000009", "to_address": "x@mail.test", "subject": mail.subject,
           "body": mail.text, "html": mail.html}
    msg = messages.build(row, None, "genservice@node.test", 0)
    assert msg["Subject"] == "Re: [#7] help Bcc: victim@mail.test X-Evil: 1"
    assert msg["Bcc"] is None and msg["X-Evil"] is None


async def test_broken_subject_still_sent_as_one_line(mail_node, smtp):
    node, to = mail_node, "subject@mail.test"
    mail = messages.spend_limit_reached("api_key", "k\r\nBcc: victim@mail.test", "1.00", "1.00")
    await node.store.write(lambda conn: mail_sql.enqueue(conn, None, to, mail.kind, mail.subject, mail.text,
                                                          mail.html, node.clock.iso_now()))
    [got] = await smtp.wait_for(to)
    assert got["Subject"] == "Spend limit reached: k Bcc: victim@mail.test" and got["Bcc"] is None
    assert smtp.messages("victim@mail.test") == []
    await outboxes_settled(node)
    assert node.store.scalar("SELECT state FROM emails WHERE to_address = ?", (to,)) == "sent"
