"""One SMTP send has an overall deadline (service/mail/smtp.py, `DEADLINE`): a server that
trickles its answer a byte at a time (each socket read well within the per-operation
`TIMEOUT`) holds the send, and its mail slot, until the deadline only; then the send is a
temporary failure, retried like any other, and its worker thread ends.

The server is a real socket served by a trio task the test drives byte by byte; smtplib runs
in its worker thread as in production. The deadline is trio's (trio stops waiting and shuts
the socket down under the thread), so trio's mock clock, jumped by the test, decides it: the
thread blocks on a real read that the next trickled byte (sent at once) or the cut ends, so
no real time passes. The per-operation socket timeout (30 real seconds) never fires here.
"""

from __future__ import annotations

from email.message import EmailMessage

import trio
import trio.testing
from conftest import START, start_node, stop_node

from service.mail import outbox, smtp

GREETING = b"220-trickle.test ESMTP, slowly\r\n"  # a multi-line greeting that never ends
STEP = 2.0  # virtual seconds between two trickled bytes
MOST = 60.0  # the documented deadline: trickling stops at twice this, whatever DEADLINE says


def message() -> EmailMessage:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "genservice@node.test", "slow@mail.test", "Hello"
    msg.set_content("hello")
    return msg


async def trickle_until_cut(mock_clock, stream, done: list) -> tuple[int, float]:
    """One byte every STEP virtual seconds until the send ends (or well past the deadline);
    (bytes sent, virtual seconds)."""
    started, sent = trio.current_time(), 0
    while not done and sent <= 2 * MOST / STEP:
        await stream.send_all(GREETING[sent % len(GREETING):][:1])
        sent += 1
        mock_clock.jump(STEP)
        await trio.testing.wait_all_tasks_blocked()
    return sent, trio.current_time() - started


async def test_a_trickling_server_is_cut_off_at_the_deadline(mock_clock):
    limiter = trio.CapacityLimiter(1)  # one mail slot: freed only when the thread has ended
    [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    config = smtp.SmtpConfig("127.0.0.1", port, security="none")
    done: list = []

    async def send() -> None:
        try:
            await smtp.deliver(config, message(), limiter)
            done.append(None)
        except smtp.SendFailure as e:
            done.append(e)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        stream = await listener.accept()
        sent, elapsed = await trickle_until_cut(mock_clock, stream, done)
        # the server is cut off: it reads the end of the connection, nothing else (no EHLO)
        assert await stream.receive_some() == b""
        await stream.aclose()
    [failure] = done
    assert isinstance(failure, smtp.Temporary) and failure.temporary
    assert str(failure) == f"no complete answer from 127.0.0.1:{port} within 60 s"
    assert (elapsed, sent) == (smtp.DEADLINE, smtp.DEADLINE / STEP)  # 30 bytes, none late enough for TIMEOUT
    async with limiter:  # the worker thread has ended and given its slot back
        assert limiter.borrowed_tokens == 1
    await listener.aclose()


async def test_the_deadline_is_a_temporary_failure_retried_like_others(nursery, tmp_path, mock_clock):
    [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    node = await start_node(nursery, tmp_path, smtp_host="127.0.0.1", smtp_port=port, smtp_security="none",
                            mail_from="genservice@mail.test")
    to = "trickled@mail.test"
    org = await node.create_org()
    r = await node.op("POST", f"/organizations/{org['organization_id']}/invitations", {"email": to, "role": "member"})
    assert r.status_code == 201
    stream = await listener.accept()
    attempt = node.store.one("SELECT state, attempts FROM emails WHERE to_address = ?", (to,))
    assert (attempt["state"], attempt["attempts"]) == ("sending", 1)

    def row():
        return node.store.one("SELECT state, attempts, error, next_attempt_at FROM emails WHERE to_address = ?", (to,))

    sent = 0
    while row()["state"] == "sending" and sent <= 2 * MOST / STEP:
        await stream.send_all(GREETING[sent % len(GREETING):][:1])
        sent += 1
        mock_clock.jump(STEP)
        await trio.testing.wait_all_tasks_blocked()
    assert await stream.receive_some() == b""
    await stream.aclose()
    got = row()
    assert (got["state"], got["attempts"], got["next_attempt_at"]) == ("pending", 1, START + smtp.DEADLINE + outbox.backoff(1))
    assert got["error"] == f"no complete answer from 127.0.0.1:{port} within 60 s"
    assert sent == smtp.DEADLINE / STEP
    await stop_node(node)
    await listener.aclose()
