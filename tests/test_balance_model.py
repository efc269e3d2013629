"""Model-based test of the balance actor: a hypothesis RuleBasedStateMachine drives random
holds, captures, partial captures, releases, grants, settings, expiries (clock advances),
failed commits and restarts against a plain-Python reference model, with invariants after
every step:

- the actor's memory equals the model (lots, slices, available, held, warning state);
- Σ ledger = available, and per lot Σ ledger = its free part;
- a fresh actor loaded from SQLite equals the live one's memory;
- one `billing.credits_low` event per armed -> below crossing;
- spend limits: holds name projects and keys, limits are set and removed, the clock crosses
  into the next UTC month; the figures equal the model's, a refusal comes where the model
  refuses (balance, then key, then project), one warning per scope per period.

The actor runs on a real SQLite file; each step is one `handle_batch` (one burst) in its own
`trio.run`, with a settable clock. Derandomized with modest counts so it runs in seconds.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import tempfile
import uuid
from pathlib import Path
from types import SimpleNamespace

from datetime import UTC, datetime

import trio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from service.actors.balance.actor import BalanceActor
from service.actors.balance.messages import Capture, Grant, LimitPut, PlaceHold, Release, SettingsPut, Sync
from service.actors.runtime import Deferred, _Failure
from service.clock import iso
from service.credits.limits import month_of
from service.errors import Conflict, InsufficientCredits, NotFound, SpendLimitReached, Unavailable, Unprocessable
from service.storage import accounts as acc
from service.storage import billing as sql
from service.storage.db import Store, _Write
from service.storage.migrate import apply_all

START = 1_790_000_000.0
CENT = 10_000
ORG = "org-model"


class SetClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def iso_now(self) -> str:
        return iso(self.t)


class DirectStore(Store):
    """The real Store's connection, each write committed at once in its own transaction
    (no writer task); `fail_next` makes the next commit fail after the writes ran (nothing
    is applied)."""

    fail_next = False
    failed = 0

    def submit(self, fn):
        item = _Write(fn)
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            item.result = fn(conn)
            if self.fail_next:
                self.fail_next = False
                self.failed += 1
                raise sqlite3.OperationalError("disk I/O error (injected)")
            conn.execute("COMMIT")
        except Exception as e:  # noqa: BLE001 - delivered to the waiter
            conn.execute("ROLLBACK")
            item.result, item.error = None, e
        item.done.set()
        return item

    def commit_now(self, fn):
        """Every write commits at once here, so the actor always decides optimistically."""
        return self.submit(fn)

    def fast_path_open(self) -> bool:
        return True


# -- the reference model ----------------------------------------------------------------------
class Model:
    def __init__(self) -> None:
        self.lots: dict[str, dict] = {}       # lot id -> lot
        self.grants: dict[str, str] = {}      # grant id -> lot id
        self.holds: dict[str, dict] = {}
        self.threshold: int | None = None
        self.notified = False
        self.crossings = 0
        self.limits: dict[tuple[str, str], int] = {}
        self.warned: dict[tuple[str, str], str] = {}  # (scope, id) -> month of its warning
        self.month = ""
        self.project_spent: dict[str, int] = {}  # this month
        self.key_spent: dict[str, int] = {}
        self.warnings = 0

    def roll(self, now: float) -> None:
        if month_of(now) != self.month:
            self.month = month_of(now)
            self.project_spent = {}

    def limit_refusal(self, amount: int, project: str | None, key: str | None) -> bool:
        for scope, sid, spent in (("api_key", key, self.key_spent), ("project", project, self.project_spent)):
            limit = self.limits.get((scope, sid)) if sid is not None else None
            if limit is not None and spent.get(sid, 0) + amount > limit:
                last = self.warned.get((scope, sid))
                if last is None or (scope == "project" and last != self.month):
                    self.warned[(scope, sid)] = self.month
                    self.warnings += 1
                return True
        return False

    def give_back(self, h: dict, amount: int) -> None:
        if h["project"] is not None and h["month"] == self.month and amount:
            self.project_spent[h["project"]] -= amount
        if h["key"] is not None and amount:
            self.key_spent[h["key"]] -= amount

    def live(self):
        return [lot for lot in self.lots.values() if not lot["expired"]]

    def available(self) -> int:
        return sum(lot["remaining"] - lot["reserved"] for lot in self.live())

    def held(self) -> int:
        return sum(h["amount"] for h in self.holds.values() if h["status"] == "held")

    def order(self):
        lots = [lot for lot in self.live() if lot["remaining"] > 0]
        return sorted(lots, key=lambda x: (x["exp"] is None, x["exp"] or 0.0, x["created"], x["id"]))

    def check_low(self) -> None:
        if self.threshold is not None and not self.notified and self.available() < self.threshold:
            self.notified = True
            self.crossings += 1

    def expire_due(self, now: float) -> None:
        for lot in sorted(self.live(), key=lambda x: (x["exp"] is None, x["exp"] or 0.0, x["created"], x["id"])):
            if lot["exp"] is not None and lot["exp"] <= now and lot["remaining"] > 0:
                lot["expired"] = True
                self.check_low()

    def grant(self, gid, lot_id, amount, exp, created, now):
        if gid in self.grants:
            return ("ok", self.grants[gid])
        self.grants[gid] = lot_id
        self.lots[lot_id] = {"id": lot_id, "amount": amount, "remaining": amount, "reserved": 0,
                             "expired": False, "exp": exp, "created": created}
        if exp is not None and exp <= now:
            self.lots[lot_id]["expired"] = True
        self.check_low()
        return ("ok", lot_id)

    def place(self, hid, amount, project=None, key=None):
        if hid in self.holds:
            return ("ok", self.holds[hid]["status"])
        if amount > self.available():
            return ("err", InsufficientCredits)
        if self.limit_refusal(amount, project, key):
            return ("err", SpendLimitReached)
        left, slices = amount, []
        for lot in self.order():
            free = lot["remaining"] - lot["reserved"]
            take = min(free, left)
            if take > 0:
                lot["reserved"] += take
                slices.append((lot["id"], take))
                left -= take
        assert left == 0
        self.holds[hid] = {"status": "held", "amount": amount, "slices": slices, "project": project, "key": key,
                           "month": self.month}
        if project is not None:
            self.project_spent[project] = self.project_spent.get(project, 0) + amount
        if key is not None:
            self.key_spent[key] = self.key_spent.get(key, 0) + amount
        self.check_low()
        return ("ok", "held")

    def settle(self, hid, captured):
        h = self.holds.get(hid)
        if h is None:
            return ("err", NotFound)
        want = "captured" if captured is not False else "released"
        if h["status"] != "held":
            return ("ok", h["status"]) if h["status"] == want else ("err", Conflict)
        if captured is not False:
            amount = h["amount"] if captured is None else captured
            if amount > h["amount"]:
                return ("err", Unprocessable)
            left = amount
            for lot_id, s in h["slices"]:
                c = min(s, left)
                left -= c
                self.lots[lot_id]["remaining"] -= c
                self.lots[lot_id]["reserved"] -= s
            self.give_back(h, h["amount"] - amount)
        else:
            for lot_id, s in h["slices"]:
                self.lots[lot_id]["reserved"] -= s
            self.give_back(h, h["amount"])
        h["status"] = want
        h["slices"] = []
        self.check_low()
        return ("ok", want)


def outcome(reply):
    if isinstance(reply, _Failure):
        return ("err", type(reply.error))
    if "grant_id" in reply:
        return ("ok", reply["id"])
    return ("ok", reply["status"])


amounts = st.one_of(st.integers(0, 30), st.integers(0, 6_000), st.integers(0, 40_000)).map(lambda c: c * CENT)
hold_ids = st.sampled_from([f"h{i}" for i in range(8)])


@st.composite
def ops(draw):
    kind = draw(st.sampled_from(["hold", "hold", "hold", "capture", "capture", "partial", "partial", "release",
                                 "grant"]))
    if kind == "hold":
        return PlaceHold(draw(hold_ids), draw(amounts), project_id=draw(st.sampled_from([None, "p1", "p2"])),
                         api_key_id=draw(st.sampled_from([None, "k1"])))
    if kind == "capture":
        return Capture(draw(hold_ids))
    if kind == "partial":
        return Capture(draw(hold_ids), draw(amounts))
    if kind == "release":
        return Release(draw(hold_ids))
    return ("grant", draw(st.sampled_from([f"g{i}" for i in range(10)])), draw(st.integers(1, 8_000)) * CENT,
            draw(st.one_of(st.none(), st.integers(-1, 5))))


class BalanceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="balance-model-"))
        path = self.dir / "db.sqlite"
        apply_all(path)
        self.store = DirectStore(path)
        self.clock = SetClock(START)
        conn = self.store.conn
        acc.insert_org(conn, ORG, "Model", iso(START), True)
        acc.insert_user(conn, "u1", ORG, "owner@model.test", "owner", iso(START))
        self.parts = SimpleNamespace(store=self.store, clock=self.clock)
        rng = random.Random(20260921)  # ids in no particular order, but replayed exactly
        self._real_new_id = sql.new_id
        sql.new_id = lambda: str(uuid.UUID(int=rng.getrandbits(128), version=4))
        self.model = Model()
        self.actor = self.fresh()
        self.grant_seq = 0

    def teardown(self) -> None:
        sql.new_id = self._real_new_id
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def fresh(self) -> BalanceActor:
        actor = BalanceActor(self.parts, ORG)
        actor._load()
        return actor

    def run_batch(self, msgs):
        async def one():
            out = await self.actor.handle_batch(msgs)
            return await out.wait() if isinstance(out, Deferred) else out
        return trio.run(one)

    def to_msg(self, op):
        if isinstance(op, tuple):
            _, gid, amount, exp_minutes = op
            exp = None if exp_minutes is None else self.clock.t + exp_minutes * 60.0
            return Grant(gid, amount, "promo", exp)
        return op

    def apply_model(self, msg, reply):
        m, now = self.model, self.clock.t
        if isinstance(msg, Grant):
            if isinstance(reply, _Failure):
                return ("err", type(reply.error))
            return m.grant(msg.grant_id, reply["id"], msg.amount_uc, self.actor.lots[reply["id"]].expires_at,
                           reply["created_at"], now)
        if isinstance(msg, PlaceHold):
            return m.place(msg.hold_id, msg.amount_uc, msg.project_id, msg.api_key_id)
        if isinstance(msg, Capture):
            return m.settle(msg.hold_id, msg.amount_uc)
        return m.settle(msg.hold_id, False)

    # -- rules ------------------------------------------------------------------------------
    @initialize(lots=st.lists(st.tuples(st.integers(1, 30_000), st.one_of(st.none(), st.integers(0, 4))),
                              min_size=1, max_size=4))
    def initial_lots(self, lots):
        msgs = [Grant(f"init{i}", c * CENT, "signup" if i == 0 else "promo",
                      None if m is None else self.clock.t + m * 60.0 + 30.0)
                for i, (c, m) in enumerate(lots)]
        self.burst_of(msgs)

    @rule(burst=st.lists(ops(), min_size=1, max_size=6))
    def burst(self, burst):
        self.burst_of([self.to_msg(op) for op in burst])

    @rule(burst=st.lists(ops(), min_size=1, max_size=3))
    def small_burst(self, burst):
        self.burst_of([self.to_msg(op) for op in burst])

    def burst_of(self, msgs):
        replies = self.run_batch(msgs)
        self.model.expire_due(self.clock.t)
        self.model.roll(self.clock.t)
        for msg, reply in zip(msgs, replies):
            want = self.apply_model(msg, reply)
            assert outcome(reply) == want, (msg, reply, want)

    @rule(threshold=st.one_of(st.none(), st.integers(0, 30_000).map(lambda c: c * CENT)))
    def set_threshold(self, threshold):
        [reply] = self.run_batch([SettingsPut(threshold)])
        self.model.expire_due(self.clock.t)
        self.model.threshold = threshold
        self.model.notified = False
        self.model.check_low()
        assert (reply["low_balance_notified_at"] is not None) == self.model.notified

    @rule(scope=st.sampled_from([("project", "p1"), ("project", "p2"), ("api_key", "k1")]),
          limit=st.one_of(st.none(), st.integers(0, 20_000).map(lambda c: c * CENT)))
    def set_limit(self, scope, limit):
        [reply] = self.run_batch([LimitPut(scope[0], scope[1], limit)])
        self.model.expire_due(self.clock.t)
        self.model.roll(self.clock.t)
        if limit is None:
            self.model.limits.pop(scope, None)
        else:
            self.model.limits[scope] = limit
        self.model.warned.pop(scope, None)
        assert reply["limit"] == (None if limit is None else f"{limit / 1_000_000:.2f}")

    @rule()
    def next_month(self):
        """Service time jumps to the first instant of the next UTC month (lots due expire)."""
        t = datetime.fromtimestamp(self.clock.t, UTC)
        first = datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=UTC)
        self.clock.t = first.timestamp()
        deadline = self.actor.next_deadline()
        if deadline is not None and self.clock.now() >= deadline:
            trio.run(self.actor.on_deadline)
            self.model.expire_due(self.clock.t)
        self.run_batch([Sync()])  # the actor's next batch starts the new month (any message would)
        self.model.roll(self.clock.t)

    @rule()
    def advance_to_next_expiry(self):
        self.advance("to-next")

    @rule(choice=st.sampled_from(["to-next", "just-before-next", "seconds", "hour"]))
    def advance(self, choice):
        deadline = self.actor.next_deadline()
        if choice == "to-next" and deadline is not None:
            self.clock.t = max(self.clock.t, deadline)
        elif choice == "just-before-next" and deadline is not None:
            self.clock.t = max(self.clock.t, deadline - 1e-6)
        elif choice == "hour":
            self.clock.t += 3600.0
        else:
            self.clock.t += 17.0
        # the runtime's loop: when service time reaches next_deadline, on_deadline runs
        deadline = self.actor.next_deadline()
        if deadline is not None and self.clock.now() >= deadline:
            trio.run(self.actor.on_deadline)
            self.model.expire_due(self.clock.t)
            nd = self.actor.next_deadline()
            assert nd is None or nd > self.clock.t
        elif choice == "just-before-next" and deadline is not None:
            before = [lot["expired"] for lot in self.model.lots.values()]
            self.model.expire_due(self.clock.t)
            assert [lot["expired"] for lot in self.model.lots.values()] == before

    @rule(burst=st.lists(ops(), min_size=1, max_size=4), really=st.integers(0, 2))
    def failed_commit(self, burst, really):
        if really:  # one in three: keeps injected failures a minority of the steps
            return self.burst_of([self.to_msg(op) for op in burst])
        before, failed = self.actor.state(), self.store.failed
        self.store.fail_next = True
        replies = self.run_batch([self.to_msg(op) for op in burst])
        self.store.fail_next = False
        if self.store.failed > failed:  # the commit failed: every ask fails, memory reloaded
            assert all(isinstance(r, _Failure) and isinstance(r.error, Unavailable) for r in replies)
        # either way nothing changed (without a commit the batch had only repeats and refusals)
        assert self.actor.state() == before

    @rule()
    def restart(self):
        before = self.actor.state()
        self.actor = self.fresh()
        assert self.actor.state() == before

    # -- invariants ---------------------------------------------------------------------------
    @invariant()
    def memory_equals_model(self):
        s, m = self.actor.state(), self.model
        assert s["available_uc"] == m.available() >= 0
        assert s["held_uc"] == m.held() >= 0
        assert {k: (v["remaining_uc"], v["reserved_uc"], v["expired"]) for k, v in s["lots"].items()} == {
            k: (v["remaining"], v["reserved"], v["expired"]) for k, v in m.lots.items()}
        assert s["holds"] == {k: {"amount_uc": h["amount"], "slices": h["slices"]}
                              for k, h in m.holds.items() if h["status"] == "held"}
        assert s["order"] == [lot["id"] for lot in m.order()]
        assert (s["low_balance_notified_at"] is not None) == m.notified
        assert s["spend"]["month"] == m.month
        assert s["spend"]["project_spent"] == {k: v for k, v in m.project_spent.items() if v}
        assert s["spend"]["key_spent"] == {k: v for k, v in m.key_spent.items() if v}
        assert s["spend"]["limits"] == m.limits

    @invariant()
    def ledger_equals_available_and_db_equals_memory(self):
        s = self.actor.state()
        assert sql.ledger_sum(self.store, ORG) == s["available_uc"]
        assert sql.committed_available(self.store, ORG) == s["available_uc"]
        for lot_id, lot in s["lots"].items():
            assert self.store.scalar("SELECT SUM(amount_uc) FROM credit_ledger WHERE lot_id = ?", (lot_id,)) == (
                lot["remaining_uc"] - lot["reserved_uc"] - lot["expired_uc"])
            assert 0 <= lot["reserved_uc"] <= lot["remaining_uc"] <= lot["amount_uc"]
        assert self.fresh().state() == s
        assert self.store.scalar("SELECT COUNT(*) FROM events WHERE event = 'billing.credits_low'") == (
            self.model.crossings)
        assert self.store.scalar("SELECT COUNT(*) FROM emails WHERE kind = 'low_balance'") == self.model.crossings
        assert self.store.scalar("SELECT COUNT(*) FROM events WHERE event = 'billing.spend_limit_reached'") == (
            self.model.warnings)
        assert self.store.scalar("SELECT COUNT(*) FROM emails WHERE kind = 'spend_limit_reached'") == (
            self.model.warnings)


BalanceMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestBalanceModel = BalanceMachine.TestCase
