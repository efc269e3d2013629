"""Probe L6: `/forgot-password` took 7.6 ms for a known address and 1.7 ms for an unknown
one. The page now does the same work for both: it hands the address to the accounts actor
without waiting (a `tell`), and the actor looks it up and queues the mail after the answer.
Tested by what the request does, not by its time."""

from __future__ import annotations

import pytest

from service.actors.accounts.people import RequestReset
from tests.conftest import until
from tests.pages import csrf, page


async def forgot(client, email):
    _, html = await page(client, "/forgot-password")
    r = await client.post("/forgot-password", form={"csrf_token": csrf(html), "email": email})
    return r, await r.get_data(as_text=True)


async def test_known_and_unknown_addresses_take_the_same_path(node, monkeypatch):
    await node.create_org(email="known@reset.test")
    accounts = node.parts.accounts
    told, tell = [], accounts.tell

    async def no_ask(*args, **kwargs):
        raise AssertionError("the page must not wait on the accounts actor")

    def record(key, msg):
        told.append(msg)
        tell(key, msg)

    monkeypatch.setattr(accounts, "ask", no_ask)
    monkeypatch.setattr(accounts, "tell", record)
    answers = []
    for email in ("known@reset.test", "nobody@reset.test"):
        told.clear()
        r, html = await forgot(node.client, email)
        assert r.status_code == 200
        assert told == [RequestReset(email)]  # one message, handed over, not waited for
        answers.append(html.replace(email, "X"))
    assert answers[0] == answers[1]
    monkeypatch.undo()

    def queued(to):
        return node.store.scalar("SELECT count(*) FROM emails WHERE to_address = ?", (to,))

    await until(lambda: queued("known@reset.test") == 1)
    await forgot(node.client, "nobody@reset.test")
    await forgot(node.client, "known@reset.test")  # the actor takes its messages in order: once this
    await until(lambda: queued("known@reset.test") == 2)  # one's mail is queued, the unknown one is done
    assert queued("nobody@reset.test") == 0
    assert node.store.scalar("SELECT count(*) FROM mail_tokens WHERE email = 'nobody@reset.test'") == 0


@pytest.mark.parametrize("email", ["", "not an address"])
async def test_bad_addresses_are_refused_before_anything_is_told(node, email, monkeypatch):
    told = []
    monkeypatch.setattr(node.parts.accounts, "tell", lambda key, msg: told.append(msg))
    r, html = await forgot(node.client, email)
    assert r.status_code in (400, 422) and told == []
