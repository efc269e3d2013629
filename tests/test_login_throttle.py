"""Probe L7: one wrong login a minute, from anywhere, locked a person out of login, password
reset and sign-up (the throttle had a bucket per email alone). Attempts are now counted per
client address and per email *from that address*: the attempts of others never lock a
person out. Time runs on the mock clock."""

from __future__ import annotations

import pytest

from service import passwords
from service.actors.sessions import SetPassword
from tests.pages import csrf, page

pytestmark = pytest.mark.usefixtures("cheap_hashes")

PW = "correct horse battery"
VICTIM = "owner@acme.test"
HOME = {"client": ("192.0.2.10", 5000)}
ATTACKERS = [{"client": (f"198.51.100.{i}", 5000)} for i in range(1, 6)]


async def with_password(node) -> dict:
    org = await node.create_org(email=VICTIM)
    await node.parts.sessions.ask("sessions", SetPassword(VICTIM, await passwords.hash_password(PW),
                                                          org["owner_user_id"], org["organization_id"]))
    return org


async def post(client, path, form, scope):
    _, html = await page(client, path if path != "/reset-password" else "/forgot-password")
    r = await client.post(path, form={"csrf_token": csrf(html), **form}, scope_base=scope)
    return r, await r.get_data(as_text=True)


async def test_others_failing_logins_never_lock_the_person_out(node, mock_clock):
    await with_password(node)
    attacker = node.app.test_client()
    statuses = []
    for minute in range(10):  # every attacker address fails often, for ten minutes
        for scope in ATTACKERS:
            for _ in range(3):
                r, _ = await post(attacker, "/login", {"email": VICTIM, "password": "wrong password here"}, scope)
                statuses.append(r.status_code)
        mock_clock.jump(60)
    assert set(statuses) == {401, 429}  # the attackers' own addresses are slowed ...
    victim = node.app.test_client()
    r, _ = await post(victim, "/login", {"email": VICTIM, "password": PW}, HOME)
    assert r.status_code == 303  # ... and the person logs in from theirs
    r, html = await post(victim, "/forgot-password", {"email": VICTIM}, HOME)
    assert r.status_code == 200 and "If an account exists for owner@acme.test" in html


async def test_others_requests_never_block_reset_or_sign_up(node, mock_clock):
    attacker, victim = node.app.test_client(), node.app.test_client()
    for scope in ATTACKERS:
        for _ in range(6):
            await post(attacker, "/forgot-password", {"email": "new@victim.test"}, scope)
            await post(attacker, "/signup", {"email": "new@victim.test", "password": "a long passphrase here",
                                             "organization": "Squat"}, scope)
    r, html = await post(attacker, "/forgot-password", {"email": "new@victim.test"}, ATTACKERS[0])
    assert r.status_code == 429 and "Too many password reset requests." in html
    r, html = await post(victim, "/forgot-password", {"email": "new@victim.test"}, HOME)
    assert r.status_code == 200
    r, html = await post(victim, "/signup", {"email": "new@victim.test", "password": "another long passphrase",
                                             "organization": "Mine"}, HOME)
    assert r.status_code != 429, html


async def test_the_address_budget_is_a_setting(nursery, tmp_path, mock_clock):
    from tests.conftest import start_node, stop_node

    n = await start_node(nursery, tmp_path, test_mode=True, login_attempts_per_address=3)
    try:
        client = n.app.test_client()
        for i in range(3):
            r, _ = await post(client, "/login", {"email": f"p{i}@acme.test", "password": "wrong password here"}, HOME)
            assert r.status_code == 401
        r, html = await post(client, "/login", {"email": "p9@acme.test", "password": "wrong password here"}, HOME)
        assert r.status_code == 429 and r.headers["Retry-After"] == "6"
        assert "Too many login attempts. Wait 6 seconds and try again." in html
    finally:
        await stop_node(n)


async def test_one_address_is_still_throttled_per_email_and_overall(node, mock_clock):
    await with_password(node)
    client = node.app.test_client()
    for _ in range(5):
        r, _ = await post(client, "/login", {"email": VICTIM, "password": "wrong password here"}, HOME)
        assert r.status_code == 401
    r, html = await post(client, "/login", {"email": VICTIM, "password": PW}, HOME)
    assert r.status_code == 429 and r.headers["Retry-After"] == "60"
    assert "Too many login attempts. Wait 60 seconds and try again." in html
    r, _ = await post(client, "/login", {"email": VICTIM, "password": PW}, ATTACKERS[0])
    assert r.status_code == 303  # the same person from another address is not held
    for i in range(15):  # the address's own bucket (20) holds for any mix of emails
        r, _ = await post(client, "/login", {"email": f"p{i}@acme.test", "password": "wrong password here"}, HOME)
        assert r.status_code == 401
    r, html = await post(client, "/login", {"email": "p99@acme.test", "password": "wrong password here"}, HOME)
    assert r.status_code == 429 and r.headers["Retry-After"] == "6"
