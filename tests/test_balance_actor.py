"""The balance actor through its registry, with trio's mock clock (storage runs inline).

Rules: spend order, holds reserving slices, capture/partial capture/release, idempotency,
402 creating nothing, expiry at exactly `expires_at` (and not a microsecond before), holds
over expiring lots, the low-balance warning (once per crossing, re-armed by PUT), failed
commits reloading from SQLite, restarts.
"""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from service.actors.balance import actor as balance_mod
from service.actors.balance.actor import BalanceActor
from service.actors.balance.messages import Capture, Grant, PlaceHold, Release, SettingsPut, Snapshot, Stop, Sync
from service.clock import iso, parse_iso
from service.errors import Conflict, InsufficientCredits, NotFound, Unavailable, Unprocessable
from service.money import UC
from service.storage import billing as sql

DAY = 86400.0


class Org:
    def __init__(self, node, org: dict) -> None:
        self.node = node
        self.id = org["organization_id"]
        self.key = org["api_key"]

    async def ask(self, msg):
        return await self.node.parts.balances.ask(self.id, msg)

    async def state(self) -> dict:
        return await self.ask(Snapshot())

    async def available(self) -> int:
        return (await self.ask(Sync()))["available_uc"]

    def ledger(self) -> list[dict]:
        return self.node.store.all("SELECT * FROM credit_ledger WHERE organization_id = ? ORDER BY seq", (self.id,))

    def check_db(self, state: dict) -> None:
        """Σ ledger = available; the DB's lots agree; a fresh load equals memory."""
        store = self.node.store
        assert sql.ledger_sum(store, self.id) == state["available_uc"]
        assert sql.committed_available(store, self.id) == state["available_uc"]
        fresh = BalanceActor(self.node.parts, self.id)
        fresh._load()
        assert fresh.state() == state
        for lot_id, lot in state["lots"].items():
            lot_sum = store.scalar("SELECT COALESCE(SUM(amount_uc), 0) FROM credit_ledger WHERE lot_id = ?", (lot_id,))
            assert lot_sum == lot["remaining_uc"] - lot["reserved_uc"] - lot["expired_uc"]


@pytest.fixture
async def org(node) -> Org:
    """An approved organization (signup lot of 200.00 expiring in 30 days)."""
    return Org(node, await node.create_org())


async def zero_org(node) -> Org:
    o = Org(node, await node.create_org(approved=False, email="z@acme.test"))
    return o


async def test_signup_lot_once(node, org, autojump_clock):
    state = await org.state()
    [lot] = state["lots"].values()
    assert (lot["grant_id"], lot["source"], lot["amount_uc"], lot["remaining_uc"]) == (
        f"signup:{org.id}", "signup", 200 * UC, 200 * UC)
    assert lot["expires_at"] == node.clock.now() + 30 * DAY
    r = await node.op("POST", f"/organizations/{org.id}/approve")
    assert r.status_code == 200
    assert len((await org.state())["lots"]) == 1
    org.check_db(await org.state())


async def test_spend_order_soonest_expiry_first_no_expiry_last_ties_by_created_then_id(node, autojump_clock):
    o = await zero_org(node)
    now = node.clock.now()
    never = await o.ask(Grant("never", 5 * UC, "promo", None))
    late = await o.ask(Grant("late", 5 * UC, "topup", now + 50 * DAY))
    soon = await o.ask(Grant("soon", 5 * UC, "promo", now + 10 * DAY))
    await trio.sleep(1)
    tie_later = await o.ask(Grant("tie-later", 5 * UC, "promo", now + 10 * DAY))
    state = await o.state()
    assert state["order"] == [soon["id"], tie_later["id"], late["id"], never["id"]]
    h = await o.ask(PlaceHold("h1", 12 * UC))
    assert (await o.state())["holds"]["h1"]["slices"] == [(soon["id"], 5 * UC), (tie_later["id"], 5 * UC),
                                                          (late["id"], 2 * UC)]
    assert h["status"] == "held" and h["amount_uc"] == 12 * UC
    o.check_db(await o.state())


async def test_hold_capture_release_and_ledger_rule(node, org, autojump_clock):
    h = await org.ask(PlaceHold("h1", 30 * UC, job_id="j1", project_id="p1", description="job one"))
    assert await org.available() == 170 * UC
    assert (await org.state())["held_uc"] == 30 * UC
    c = await org.ask(Capture("h1"))
    assert (c["status"], c["captured_uc"], c["settled_at"]) == ("captured", 30 * UC, iso(node.clock.now()))
    await org.ask(PlaceHold("h2", 50 * UC, job_id="j2", project_id="p1"))
    part = await org.ask(Capture("h2", 20 * UC))
    assert (part["status"], part["captured_uc"]) == ("captured", 20 * UC)
    await org.ask(PlaceHold("h3", 10 * UC))
    rel = await org.ask(Release("h3"))
    assert (rel["status"], rel["captured_uc"]) == ("released", None)
    assert await org.available() == 150 * UC
    kinds = [(e["kind"], e["amount_uc"]) for e in org.ledger()]
    assert kinds == [("grant", 200 * UC), ("hold", -30 * UC), ("capture", 0), ("hold", -50 * UC),
                     ("capture", 30 * UC), ("hold", -10 * UC), ("release", 10 * UC)]
    hold_rows = {e["hold_id"]: e for e in org.ledger() if e["kind"] == "hold"}
    assert (hold_rows["h1"]["project_id"], hold_rows["h1"]["job_id"], hold_rows["h1"]["description"]) == (
        "p1", "j1", "job one")
    org.check_db(await org.state())


async def test_idempotent_on_ids(node, org, autojump_clock):
    first = await org.ask(PlaceHold("h1", 10 * UC))
    again = await org.ask(PlaceHold("h1", 99 * UC))
    assert again == first
    assert await org.available() == 190 * UC
    c1 = await org.ask(Capture("h1", 4 * UC))
    c2 = await org.ask(Capture("h1"))
    assert c1 == c2 and c2["captured_uc"] == 4 * UC
    assert await org.available() == 196 * UC
    with pytest.raises(Conflict) as e:
        await org.ask(Release("h1"))
    assert e.value.message == "The hold was already captured."
    await org.ask(PlaceHold("h2", 10 * UC))
    r1 = await org.ask(Release("h2"))
    assert await org.ask(Release("h2")) == r1
    with pytest.raises(Conflict) as e:
        await org.ask(Capture("h2"))
    assert e.value.message == "The hold was already released."
    with pytest.raises(NotFound):
        await org.ask(Capture("nope"))
    with pytest.raises(NotFound):
        await org.ask(Release("nope"))
    g1 = await org.ask(Grant("g", 5 * UC))
    assert await org.ask(Grant("g", 7 * UC)) == g1
    assert await org.available() == 201 * UC
    org.check_db(await org.state())


async def test_repeats_after_restart_and_eviction_come_from_the_db(node, org, autojump_clock, monkeypatch):
    monkeypatch.setattr(balance_mod, "RECENT", 2)
    for i in range(5):
        await org.ask(PlaceHold(f"h{i}", UC))
        await org.ask(Capture(f"h{i}") if i % 2 else Release(f"h{i}"))
    assert await org.ask(Capture("h1")) == await org.ask(Capture("h1"))
    with pytest.raises(Conflict):
        await org.ask(Capture("h0"))
    await org.ask(Stop())
    assert (await org.ask(PlaceHold("h0", 50 * UC)))["status"] == "released"
    assert (await org.ask(Capture("h3")))["captured_uc"] == UC
    assert await org.available() == 198 * UC
    org.check_db(await org.state())


async def test_hold_id_of_another_org_is_refused(node, org, autojump_clock):
    other = Org(node, await node.create_org(email="b@b.test"))
    await other.ask(PlaceHold("shared", UC))
    with pytest.raises(Conflict):
        await org.ask(PlaceHold("shared", UC))
    with pytest.raises(NotFound):
        await org.ask(Capture("shared"))
    assert (await org.state())["holds"] == {}


async def test_402_creates_nothing(node, org, autojump_clock):
    await org.ask(PlaceHold("h1", 150 * UC))
    before = (await org.state(), org.ledger())
    with pytest.raises(InsufficientCredits) as e:
        await org.ask(PlaceHold("h2", 50 * UC + 1))
    assert (e.value.status, e.value.code, e.value.message, e.value.details) == (
        402, "billing.insufficient_credits", "Not enough credits.", {"required": "50.00", "available": "50.00"})
    assert (await org.state(), org.ledger()) == before
    assert node.store.one("SELECT 1 AS x FROM credit_holds WHERE id = 'h2'") is None
    assert (await org.ask(PlaceHold("h3", 50 * UC)))["status"] == "held"  # exactly the rest is fine
    assert await org.available() == 0


async def test_over_capture_and_bad_amounts_refused(node, org, autojump_clock):
    await org.ask(PlaceHold("h1", 10 * UC))
    with pytest.raises(Unprocessable) as e:
        await org.ask(Capture("h1", 10 * UC + 1))
    assert e.value.details == {"held": "10.00", "requested": "10.00"}  # two places shown
    with pytest.raises(Unprocessable):
        await org.ask(Capture("h1", -1))
    with pytest.raises(Unprocessable):
        await org.ask(PlaceHold("h2", -5))
    with pytest.raises(Unprocessable):
        await org.ask(PlaceHold("h2", 1.5))  # type: ignore[arg-type]  money is never float
    with pytest.raises(Unprocessable):
        await org.ask(Grant("g", 0))
    assert (await org.state())["holds"]["h1"]["amount_uc"] == 10 * UC
    org.check_db(await org.state())


async def test_expiry_exactly_at_expires_at_not_a_microsecond_before(node, autojump_clock):
    o = await zero_org(node)
    lot = await o.ask(Grant("g", 10 * UC, "promo", node.clock.now() + 100.0))
    at = parse_iso(lot["expires_at"])
    await trio.sleep_until(node.clock.trio_time(at - 1e-6))
    await trio.testing.wait_all_tasks_blocked()
    assert [e["kind"] for e in o.ledger()] == ["grant"]
    assert await o.available() == 10 * UC
    await trio.sleep_until(node.clock.trio_time(at))
    await trio.testing.wait_all_tasks_blocked()
    # written by the actor's own deadline, at exactly expires_at, with no message sent
    assert [(e["kind"], e["amount_uc"], e["created_at"]) for e in o.ledger()] == [
        ("grant", 10 * UC, lot["created_at"]), ("expiry", -10 * UC, lot["expires_at"])]
    assert await o.available() == 0
    o.check_db(await o.state())


async def test_clock_advance_expires_at_once(node, autojump_clock):
    o = await zero_org(node)
    lot = await o.ask(Grant("g", 10 * UC, "promo", node.clock.now() + 3600.0))
    node.clock.advance(3599.0)
    await trio.testing.wait_all_tasks_blocked()
    assert [e["kind"] for e in o.ledger()] == ["grant"]
    node.clock.advance(1.0)
    await trio.testing.wait_all_tasks_blocked()
    assert [e["kind"] for e in o.ledger()] == ["grant", "expiry"]
    assert o.ledger()[-1]["created_at"] == lot["expires_at"]


async def test_hold_over_expiring_lot_capture_charges_it_release_expires_it(node, autojump_clock):
    o = await zero_org(node)
    now = node.clock.now()
    a = await o.ask(Grant("a", 100 * UC, "promo", now + DAY))
    b = await o.ask(Grant("b", 100 * UC, "topup", now + 10 * DAY))
    await o.ask(PlaceHold("full", 120 * UC))       # a:100, b:20
    await o.ask(PlaceHold("part", 40 * UC))        # b:40
    await o.ask(PlaceHold("rel", 30 * UC))         # b:30
    assert (await o.state())["holds"]["full"]["slices"] == [(a["id"], 100 * UC), (b["id"], 20 * UC)]
    node.clock.advance(DAY)
    await trio.testing.wait_all_tasks_blocked()
    st = await o.state()
    assert st["lots"][a["id"]]["expired"] and st["available_uc"] == 10 * UC and st["held_uc"] == 190 * UC
    assert [e["amount_uc"] for e in o.ledger() if e["kind"] == "expiry"] == []  # a had nothing free
    # capture charges the expired lot's reservation
    await o.ask(Capture("full"))
    st = await o.state()
    assert st["lots"][a["id"]]["remaining_uc"] == 0 and st["available_uc"] == 10 * UC
    # partial capture on an unexpired lot returns the rest to available
    await o.ask(Capture("part", 15 * UC))
    assert await o.available() == 35 * UC
    # a hold with a slice of an expired lot: the returned part expires at once
    c = await o.ask(Grant("c", 10 * UC, "promo", node.clock.now() + 60))
    await o.ask(PlaceHold("h-c", 15 * UC))         # c:10, b:5
    node.clock.advance(60)
    await trio.testing.wait_all_tasks_blocked()
    await o.ask(Release("h-c"))
    assert await o.available() == 35 * UC           # b's 5 back; c's 10 expired
    tail = [(e["kind"], e["amount_uc"], e["lot_id"]) for e in o.ledger()[-3:]]
    assert tail == [("release", 10 * UC, c["id"]), ("expiry", -10 * UC, c["id"]), ("release", 5 * UC, b["id"])]
    await o.ask(Release("rel"))
    assert await o.available() == 65 * UC
    o.check_db(await o.state())


async def test_partial_capture_of_expired_slice_expires_the_rest(node, autojump_clock):
    o = await zero_org(node)
    a = await o.ask(Grant("a", 50 * UC, "promo", node.clock.now() + 60))
    await o.ask(PlaceHold("h", 50 * UC))
    node.clock.advance(61)
    await o.ask(Capture("h", 20 * UC))
    rows = [(e["kind"], e["amount_uc"]) for e in o.ledger()]
    # the lot expired with nothing free (no entry); the 30 returned by the capture expire at once
    assert rows == [("grant", 50 * UC), ("hold", -50 * UC), ("capture", 30 * UC), ("expiry", -30 * UC)]
    st = await o.state()
    assert st["lots"][a["id"]]["remaining_uc"] == 30 * UC and st["lots"][a["id"]]["expired_uc"] == 30 * UC
    assert st["available_uc"] == 0
    o.check_db(st)


async def test_grant_already_expired_expires_at_once(node, autojump_clock):
    o = await zero_org(node)
    lot = await o.ask(Grant("old", 5 * UC, "promo", node.clock.now() - 1))
    assert lot["remaining"] == "5.00"
    assert [(e["kind"], e["amount_uc"]) for e in o.ledger()] == [("grant", 5 * UC), ("expiry", -5 * UC)]
    assert await o.available() == 0


def low_events(node, org_id):
    return [json.loads(r["data"]) for r in node.store.all(
        "SELECT data FROM events WHERE organization_id = ? AND event = 'billing.credits_low' ORDER BY seq", (org_id,))]


def low_emails(node, org_id):
    return node.store.all("SELECT to_address, subject FROM emails WHERE organization_id = ?", (org_id,))


async def test_low_balance_once_per_crossing_and_rearm(node, org, autojump_clock):
    s = await org.ask(SettingsPut(150 * UC))
    assert s == {"low_balance_threshold": "150.00", "low_balance_notified_at": None}
    await org.ask(PlaceHold("h1", 50 * UC))             # 150: not below
    assert low_events(node, org.id) == []
    await org.ask(PlaceHold("h2", 1 * UC))              # 149: crosses
    assert low_events(node, org.id) == [{"available": "149.00", "threshold": "150.00",
                                         "organization_id": org.id}]
    assert low_emails(node, org.id) == [{"to_address": "owner@acme.test", "subject": "Your credit balance is low"}]
    assert sql.settings(node.store, org.id)["low_balance_notified_at"] == iso(node.clock.now())
    await org.ask(PlaceHold("h3", 10 * UC))             # further down: no second warning
    await org.ask(Release("h1"))                        # back above (189)
    await org.ask(PlaceHold("h4", 60 * UC))             # below again: still notified, no re-arm
    assert len(low_events(node, org.id)) == 1
    # PUT re-arms and checks at once: 129 < 150 fires immediately
    s = await org.ask(SettingsPut(150 * UC))
    assert s["low_balance_notified_at"] == iso(node.clock.now())
    assert len(low_events(node, org.id)) == 2 and len(low_emails(node, org.id)) == 2
    # a threshold at or below the balance only arms
    s = await org.ask(SettingsPut(129 * UC))
    assert s == {"low_balance_threshold": "129.00", "low_balance_notified_at": None}
    await org.ask(SettingsPut(None))
    await org.ask(PlaceHold("h5", 100 * UC))
    assert len(low_events(node, org.id)) == 2
    org.check_db(await org.state())


async def test_low_balance_crossed_by_expiry_in_the_same_transaction(node, autojump_clock):
    o = await zero_org(node)
    await o.ask(Grant("a", 10 * UC, "promo", node.clock.now() + 60))
    await o.ask(Grant("b", 10 * UC, "promo", None))
    await o.ask(SettingsPut(15 * UC))
    node.clock.advance(60)
    await trio.testing.wait_all_tasks_blocked()
    [ev] = low_events(node, o.id)
    assert ev["available"] == "10.00"
    row = node.store.one("SELECT created_at FROM events WHERE event = 'billing.credits_low' AND organization_id = ?",
                         (o.id,))
    expiry = [e for e in o.ledger() if e["kind"] == "expiry"][0]
    assert row["created_at"] == expiry["created_at"] == sql.settings(node.store, o.id)["low_balance_notified_at"]


async def test_failed_commit_reloads_and_fails_the_batch(node, org, autojump_clock, monkeypatch):
    await org.ask(PlaceHold("h1", 10 * UC))
    before = await org.state()
    real = sql.persist

    def broken(conn, org_id, w):
        real(conn, org_id, w)
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(sql, "persist", broken)
    async with trio.open_nursery() as n:
        results = []

        async def one(msg):
            try:
                results.append(await org.ask(msg))
            except Unavailable as e:
                results.append(e)

        n.start_soon(one, PlaceHold("h2", 5 * UC))
        n.start_soon(one, Capture("h1"))
        n.start_soon(one, Grant("g", 5 * UC))
    assert len(results) == 3 and all(isinstance(r, Unavailable) for r in results)
    monkeypatch.setattr(sql, "persist", real)
    assert await org.state() == before
    assert node.store.one("SELECT 1 AS x FROM credit_holds WHERE id = 'h2'") is None
    assert (await org.ask(Capture("h1")))["status"] == "captured"
    org.check_db(await org.state())


async def test_burst_is_one_write_and_replies_after_commit(node, org, autojump_clock):
    writes_before = node.store.writes
    async with trio.open_nursery() as n:
        for i in range(50):
            n.start_soon(org.ask, PlaceHold(f"h{i}", UC))
    assert node.store.writes - writes_before <= 3  # the first message may go alone
    assert (await org.state())["held_uc"] == 50 * UC
    org.check_db(await org.state())


async def test_stop_then_fresh_actor_loads_the_same_state(node, org, autojump_clock):
    await org.ask(Grant("g", 7 * UC, "promo", node.clock.now() + 10))
    await org.ask(PlaceHold("h1", 100 * UC))
    await org.ask(SettingsPut(500 * UC))
    before = await org.state()
    await org.ask(Stop())
    await trio.testing.wait_all_tasks_blocked()
    assert org.id not in node.parts.balances.keys()
    assert await org.state() == before
    node.clock.advance(10)
    await trio.testing.wait_all_tasks_blocked()
    st = await org.state()
    # h1 reserved the soon-expiring 7 first: the lot expires with nothing free
    [g] = [lot for lot in st["lots"].values() if lot["grant_id"] == "g"]
    assert (g["expired"], g["reserved_uc"], g["expired_uc"]) == (True, 7 * UC, 0)
    assert st["held_uc"] == 100 * UC and st["available_uc"] == 107 * UC
    org.check_db(st)


async def test_pipelined_batch_on_top_of_a_failed_commit_fails_too(nursery, tmp_path):
    """Batch 1 (a hold) is committing in the writer thread when batch 2 (its capture) is
    decided on top of it; batch 1's commit fails: both asks fail, nothing is applied, memory
    is reloaded once, and the next try succeeds."""
    import threading
    from types import SimpleNamespace

    from service.actors.runtime import Registry
    from service.clock import Clock
    from service.storage.db import Store
    from service.storage.migrate import apply_all

    apply_all(tmp_path / "db")
    store = Store(tmp_path / "db")  # the real writer thread ...
    store._fast_path_ok = lambda: False  # ... always (batch 1 blocks inside its commit)
    clock = Clock()
    services = SimpleNamespace(store=store, clock=clock)
    reg = Registry("balances", lambda org: BalanceActor(services, org), clock)
    await nursery.start(store.run)
    await nursery.start(reg.run)
    await reg.ask("o", Grant("g", 100 * UC))
    entered, go = threading.Event(), threading.Event()
    real, calls = sql.persist, []

    def persist(conn, org_id, w):
        calls.append(len(w.hold_inserts))
        if len(calls) == 1:
            entered.set()
            go.wait(10)
            raise sqlite3_error("disk I/O error (test)")
        return real(conn, org_id, w)

    sql.persist = persist
    results = {}
    try:
        async def one(name, msg):
            try:
                results[name] = await reg.ask("o", msg)
            except Unavailable as e:
                results[name] = e

        async with trio.open_nursery() as n:
            n.start_soon(one, "hold", PlaceHold("h1", 30 * UC))
            await trio.to_thread.run_sync(entered.wait)
            n.start_soon(one, "capture", Capture("h1"))
            await trio.testing.wait_all_tasks_blocked()
            go.set()
    finally:
        sql.persist = real
    assert isinstance(results["hold"], Unavailable) and isinstance(results["capture"], Unavailable)
    assert calls[0] == 1  # batch 1 carried the hold; batch 2's write was refused before persist
    state = await reg.ask("o", Snapshot())
    assert (state["available_uc"], state["held_uc"], state["holds"]) == (100 * UC, 0, {})
    assert store.one("SELECT 1 AS x FROM credit_holds") is None
    assert sql.ledger_sum(store, "o") == 100 * UC
    assert (await reg.ask("o", PlaceHold("h1", 30 * UC)))["status"] == "held"
    assert (await reg.ask("o", Capture("h1")))["status"] == "captured"
    assert sql.ledger_sum(store, "o") == 70 * UC
    store.close()


def sqlite3_error(msg):
    import sqlite3
    return sqlite3.OperationalError(msg)


async def test_store_fast_path_keeps_submission_order(nursery, tmp_path):
    """A write submitted while an earlier one is handed to the writer task (not yet run)
    must not overtake it on the fast path: the balance actor chains its writes on order."""
    from service.storage.db import Store
    from service.storage.migrate import apply_all

    apply_all(tmp_path / "db")
    store = Store(tmp_path / "db")
    await nursery.start(store.run)
    order, wake = [], trio.Event()

    async def second():
        await wake.wait()
        await store.wait(store.submit(lambda conn: order.append("B")))

    nursery.start_soon(second)
    await trio.testing.wait_all_tasks_blocked()
    wake.set()                                        # `second` is runnable first ...
    a = store.submit(lambda conn: order.append("A"))  # ... then the writer task gets A
    await store.wait(a)
    await trio.testing.wait_all_tasks_blocked()
    assert order == ["A", "B"]
    store.close()


async def test_bad_ids_are_refused_cleanly(node, org, autojump_clock):
    with pytest.raises(Unprocessable):
        await org.ask(PlaceHold("", UC))
    with pytest.raises(Unprocessable):
        await org.ask(PlaceHold(["not", "hashable"], UC))  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        await org.ask(Capture({"x": 1}))  # type: ignore[arg-type]
    assert (await org.ask(PlaceHold("ok", UC)))["status"] == "held"  # no reload, no 503
    org.check_db(await org.state())


async def test_optimistic_new_hold_ids_are_caught_by_the_primary_key(node, org, autojump_clock, monkeypatch, caplog):
    """With the store's fast path open, a new hold id is not read before deciding. A repeat
    of a hold settled before a restart is refused by the primary key, rolled back alone and
    decided again reading the id: the original hold, no 503, no log. A refusal of an unread
    id reads it first; another organization's id still gets 409."""
    monkeypatch.setattr(type(node.store), "fast_path_open", lambda self: True)
    reads: list[list[str]] = []
    real = sql.holds_by_ids
    monkeypatch.setattr(sql, "holds_by_ids", lambda store, ids: reads.append(list(ids)) or real(store, ids))
    taken: list[str] = []
    real_persist = sql.persist

    def persist(conn, org_id, w):
        try:
            return real_persist(conn, org_id, w)
        except sql.HoldIdTaken:
            taken.append(w.hold_inserts[0][0])
            raise

    monkeypatch.setattr(sql, "persist", persist)
    other = Org(node, await node.create_org(email="b@b.test"))
    await other.ask(PlaceHold("theirs", UC))
    assert (await org.ask(PlaceHold("h1", UC)))["status"] == "held"
    await org.ask(Capture("h1"))
    assert reads == []  # new ids and a capture of a hold in memory: no read
    await org.ask(Stop())
    repeat = await org.ask(PlaceHold("h1", 5 * UC))
    assert (repeat["status"], repeat["amount_uc"], repeat["captured_uc"]) == ("captured", UC, UC)
    assert (reads, taken) == ([["h1"]], ["h1"])  # read only after the primary key refused the insert
    await org.ask(Stop())
    assert (await org.ask(PlaceHold("h1", 1000 * UC)))["status"] == "captured"  # not a 402
    assert reads == [["h1"], ["h1"]]
    with pytest.raises(Conflict):
        await org.ask(PlaceHold("theirs", UC))
    assert taken == ["h1", "theirs"]
    state = await org.state()
    assert (state["available_uc"], state["held_uc"], state["holds"]) == (199 * UC, 0, {})
    assert node.store.scalar("SELECT COUNT(*) FROM credit_holds WHERE organization_id = ?", (org.id,)) == 1
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    org.check_db(state)


async def test_commit_now_only_when_nothing_is_queued(nursery, tmp_path):
    """`commit_now` commits at once or does nothing: never behind or ahead of a queued write."""
    from service.storage.db import Store
    from service.storage.migrate import apply_all

    apply_all(tmp_path / "db")
    store = Store(tmp_path / "db")
    await nursery.start(store.run)
    ran = []
    item = store.commit_now(lambda conn: ran.append("now"))
    assert item is not None and item.done.is_set() and item.error is None and ran == ["now"]
    store._fast_path_ok = lambda: False
    queued = store.submit(lambda conn: ran.append("queued"))  # handed to the writer task
    assert store.commit_now(lambda conn: ran.append("never")) is None
    await store.wait(queued)
    assert ran == ["now", "queued"]
    store.close()
