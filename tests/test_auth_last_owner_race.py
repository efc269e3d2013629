"""Two owners removing or demoting each other at the same moment: the accounts actor decides
one change at a time inside one transaction, so exactly one wins and the other gets 409
"The last owner cannot be ..."; the organization always keeps an owner, and the loser's key
still works (api-spec "Roles"; docs/security-limits.md)."""

from __future__ import annotations

import pytest
import trio

from conftest import err, j


async def owners(node, org_id: str) -> int:
    return node.store.one("SELECT COUNT(*) AS n FROM users WHERE organization_id = ? AND role = 'owner' "
                          "AND is_active = 1", (org_id,))["n"]


@pytest.mark.parametrize("how", ["remove", "demote"])
async def test_two_owners_removing_each_other_at_once_leave_one(node, org, how):
    org_id = org["organization_id"]
    second = await node.add_member(org_id, "owner", "second@acme.test")
    first_id = org["owner_user_id"]
    answers: list[tuple[int, dict | None]] = []

    async def change(user_id: str) -> None:
        path = f"/organizations/{org_id}/members/{user_id}"
        r = await (node.op("DELETE", path) if how == "remove" else node.op("PATCH", path, {"role": "member"}))
        answers.append((r.status_code, await j(r) if r.status_code != 204 else None))

    async with trio.open_nursery() as n:
        n.start_soon(change, first_id)
        n.start_soon(change, second["user_id"])
    verb = "removed" if how == "remove" else "demoted"
    statuses = sorted(s for s, _ in answers)
    assert statuses == ([204, 409] if how == "remove" else [200, 409])
    loser = [b for s, b in answers if s == 409][0]
    assert (err(loser)["code"], err(loser)["message"]) == ("request.conflict", f"The last owner cannot be {verb}.")
    assert await owners(node, org_id) == 1
    keys = [org["api_key"], second["api_key"]]
    still = [(await node.call("GET", "/v1/roles", k)).status_code for k in keys]
    assert sorted(still) == ([200, 401] if how == "remove" else [200, 200])
