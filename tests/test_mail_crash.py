"""Crash point `mail_sending` on a real `genservice serve` with the test SMTP server: the
process dies (exit 137) after the invitation mail is committed `sending` and before the SMTP
conversation; the next start records it `unknown` and never sends it (at most once), while
a mail queued after the restart goes out."""

import sqlite3

import httpx
import pytest

from test_topups_crash import serve
from waiting import wait_until_sync

OP = {"Authorization": "Bearer crash-test-token"}


def smtp_env(smtp) -> dict:
    return {f"GENSERVICE_{k.upper()}": str(v) for k, v in smtp.settings().items()}


def mail_states(data_dir) -> dict:
    conn = sqlite3.connect(data_dir / "genservice.db")
    try:
        return dict(conn.execute("SELECT to_address, state FROM emails").fetchall())
    finally:
        conn.close()


@pytest.mark.slow
def test_crash_between_sending_and_smtp_never_sends_twice(tmp_path, smtp):
    node = serve(tmp_path, "mail_sending", **smtp_env(smtp))
    url = node.url
    try:
        org = httpx.post(url + "/operator/v1/organizations", headers=OP,
                         json={"name": "Acme", "owner_email": "o@crash.test"}).json()["data"]
        try:
            httpx.post(url + f"/operator/v1/organizations/{org['organization_id']}/invitations", headers=OP,
                       json={"email": "lost@crash.test", "role": "member"}, timeout=10)
        except httpx.HTTPError:
            pass  # the process may die before it answers
        assert node.wait_exit(10) == 137
    finally:
        node.stop()
    assert mail_states(tmp_path) == {"lost@crash.test": "sending"}

    node = serve(tmp_path, **smtp_env(smtp))
    url = node.url
    try:
        r = httpx.post(url + f"/operator/v1/organizations/{org['organization_id']}/invitations", headers=OP,
                       json={"email": "after@crash.test", "role": "member"})
        assert r.status_code == 201
        wait_until_sync(lambda: smtp.messages("after@crash.test"), 20, every=0.05)
        assert len(smtp.messages("after@crash.test")) == 1
        assert smtp.messages("lost@crash.test") == []
        # the SMTP server holds the message before the node has read its reply and recorded it
        wait_until_sync(lambda: mail_states(tmp_path).get("after@crash.test") == "sent", 20, every=0.05)
    finally:
        node.stop()
    assert mail_states(tmp_path) == {"lost@crash.test": "unknown", "after@crash.test": "sent"}
