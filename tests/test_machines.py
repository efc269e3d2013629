"""The lifecycle tables, pure: no event loop, no storage."""

from __future__ import annotations

import itertools

import pytest

from service.machines import (
    ALL,
    HOLD,
    JOB,
    LOW_BALANCE,
    NEW,
    RUN,
    SET_STATE,
    STEP,
    TICKET,
    TOPUP,
    IllegalTransition,
    Machine,
)

# Spec "States and transitions" -> Generation job, row for row:
#   (new) submit -> queued: the hold is placed (HOLD machine); the job is created as `queued`.
#   queued or rendering | render finishes -> completed | hold captured; job webhook
#   queued or rendering | generation error -> failed   | hold released; job webhook
#   rendering | content flagged -> nsfw                 | hold released; job webhook
#   queued | cancel -> canceled                         | hold released; no job webhook
#   rendering | cancel -> canceled                      | hold released; webhook later when the worker ends
#   any terminal | cancel -> unchanged                  | returned unchanged
# plus (not shown in the spec, added by design): queued -> rendering, the late
# worker report on a canceled job, and ignored late reports on other finals.
JOB_ROWS = [
    ("queued", "start", "rendering", ("render",)),
    ("queued", "finish", "completed", ("capture", "webhook")),
    ("rendering", "finish", "completed", ("capture", "webhook")),
    ("queued", "fail", "failed", ("release", "webhook")),
    ("rendering", "fail", "failed", ("release", "webhook")),
    ("rendering", "flag", "nsfw", ("release", "webhook")),
    ("queued", "cancel", "canceled", ("release",)),
    ("rendering", "cancel", "canceled", ("release", "discard_render")),
    ("completed", "cancel", "completed", ()),
    ("failed", "cancel", "failed", ()),
    ("nsfw", "cancel", "nsfw", ()),
    ("canceled", "cancel", "canceled", ()),
    ("canceled", "render_ended", "canceled", ("webhook",)),
    ("completed", "render_ended", "completed", ()),
    ("failed", "render_ended", "failed", ()),
    ("nsfw", "render_ended", "nsfw", ()),
    ("rendering", "resume", "rendering", ("render",)),
    ("completed", "resume", "completed", ("capture",)),
    ("failed", "resume", "failed", ("release",)),
    ("nsfw", "resume", "nsfw", ("release",)),
    ("canceled", "resume", "canceled", ("release",)),
]

RUN_ROWS = [
    ("queued", "start", "running", ()),
    ("queued", "step_failed", "failed", ("cancel_unfinished", "release_failed")),
    ("running", "step_failed", "failed", ("cancel_unfinished", "release_failed")),
    ("queued", "cancel", "canceled", ("cancel_unfinished",)),
    ("running", "cancel", "canceled", ("cancel_unfinished",)),
    ("running", "all_done", "completed", ("fill_outputs",)),
    ("completed", "cancel", "completed", ()),
    ("failed", "cancel", "failed", ()),
    ("canceled", "cancel", "canceled", ()),
]

STEP_ROWS = [
    ("pending", "start", "running", ("start",)),
    ("running", "finish", "completed", ("record_outputs",)),
    ("running", "fail", "failed", ()),
    ("pending", "fail", "failed", ()),
    ("pending", "cancel", "canceled", ()),
    ("running", "cancel", "canceled", ()),
]

HOLD_ROWS = [
    (NEW, "place", "held", ("reserve",)),
    ("held", "capture", "captured", ("charge",)),
    ("held", "release", "released", ("unreserve",)),
    ("captured", "capture", "captured", ()),
    ("released", "release", "released", ()),
]

TOPUP_ROWS = [
    (NEW, "checkout_started", "pending", ()),
    (NEW, "checkout_failed", "expired", ()),
    ("pending", "confirm", "paid", ("add_lot",)),
    ("paid", "confirm", "paid", ()),
    ("pending", "expire", "expired", ()),
]

LOW_BALANCE_ROWS = [
    ("armed", "below", "notified", ("notify",)),
    ("notified", "below", "notified", ()),
    ("armed", "settings_put", "armed", ("check_now",)),
    ("notified", "settings_put", "armed", ("check_now",)),
    ("armed", "above", "armed", ()),
    ("notified", "above", "notified", ()),
]

_TICKET_STATES = ["open", "triaging", "awaiting_customer", "resolved", "closed"]
_TICKET_LIVE = ["open", "triaging", "awaiting_customer", "resolved"]

TICKET_ROWS = [
    ("awaiting_customer", "customer_reply", "open", ("state_changed",)),
    ("open", "customer_reply", "open", ()),
    ("triaging", "customer_reply", "triaging", ()),
    ("resolved", "customer_reply", "open", ("state_changed",)),
    ("open", "support_reply", "awaiting_customer", ("replied", "state_changed")),
    ("triaging", "support_reply", "awaiting_customer", ("replied", "state_changed")),
    ("resolved", "support_reply", "awaiting_customer", ("replied", "state_changed")),
    ("awaiting_customer", "support_reply", "awaiting_customer", ("replied",)),
    *[
        (src, SET_STATE + dst, dst, () if src == dst else ("state_changed",))
        for src in _TICKET_LIVE
        for dst in _TICKET_STATES
    ],
    ("closed", SET_STATE + "closed", "closed", ()),
]

EXPECTED = {
    JOB: JOB_ROWS,
    RUN: RUN_ROWS,
    STEP: STEP_ROWS,
    HOLD: HOLD_ROWS,
    TOPUP: TOPUP_ROWS,
    LOW_BALANCE: LOW_BALANCE_ROWS,
    TICKET: TICKET_ROWS,
}

STATES = {
    JOB: ({"queued", "rendering", "completed", "failed", "nsfw", "canceled"},
          {"completed", "failed", "nsfw", "canceled"}),
    RUN: ({"queued", "running", "completed", "failed", "canceled"}, {"completed", "failed", "canceled"}),
    STEP: ({"pending", "running", "completed", "failed", "canceled"}, {"completed", "failed", "canceled"}),
    HOLD: ({"held", "captured", "released"}, {"captured", "released"}),
    TOPUP: ({"pending", "paid", "expired"}, {"paid", "expired"}),
    LOW_BALANCE: ({"armed", "notified"}, set()),
    TICKET: (set(_TICKET_STATES), {"closed"}),
}

# Rows that leave a final state for another state: the documented reopen rows.
# (resolved -> open on a customer reply is not listed because resolved is not final.)
REOPEN_ROWS: set[tuple[str, str, str]] = set()
# Self-rows on a final state that still carry effects (documented in the module).
FINAL_SELF_ROWS_WITH_EFFECTS = {("job", "canceled", "render_ended"), ("job", "completed", "resume"),
                                 ("job", "failed", "resume"), ("job", "nsfw", "resume"),
                                 ("job", "canceled", "resume")}


def _all_rows():
    for m, rows in EXPECTED.items():
        for src, event, dst, effects in rows:
            yield pytest.param(m, src, event, dst, effects, id=f"{m.name}:{src}+{event}")


def _illegal_pairs():
    for m in ALL:
        events = sorted(m.events) + ["bogus_event"]
        for src in [NEW, *sorted(m.states), "no_such_state"]:
            for event in events:
                if (src, event) not in m.table:
                    yield pytest.param(m, src, event, id=f"{m.name}:{src}+{event}")


def test_all_lists_every_machine_once():
    assert ALL == (JOB, RUN, STEP, HOLD, TOPUP, LOW_BALANCE, TICKET)
    assert len({m.name for m in ALL}) == len(ALL)
    assert set(EXPECTED) == set(ALL)


@pytest.mark.parametrize("m", ALL, ids=lambda m: m.name)
def test_states_and_finals(m):
    states, final = STATES[m]
    assert m.states == states
    assert m.final == final
    for s in states:
        assert m.is_final(s) is (s in final)
    assert not m.is_final(NEW)
    assert not m.is_final("no_such_state")


@pytest.mark.parametrize("m", ALL, ids=lambda m: m.name)
def test_table_is_exactly_the_expected_rows(m):
    rows = EXPECTED[m]
    keys = [(src, event) for src, event, _, _ in rows]
    assert len(keys) == len(set(keys)), "duplicate row in the expected list"
    assert dict(m.table) == {(src, event): (dst, effects) for src, event, dst, effects in rows}


def test_job_table_matches_spec_rows():
    # Spelled out separately so a change to the job table is a deliberate spec change.
    assert sorted(JOB.table.items(), key=repr) == sorted(
        (((src, event), (dst, effects)) for src, event, dst, effects in JOB_ROWS), key=repr
    )
    # The spec's distinguishing points, checked by name:
    assert JOB.apply("queued", "cancel") == ("canceled", ("release",))  # no webhook
    assert "webhook" not in JOB.apply("rendering", "cancel")[1]  # webhook only later...
    assert JOB.apply("canceled", "render_ended") == ("canceled", ("webhook",))  # ...here
    for final in ("completed", "failed", "nsfw", "canceled"):
        assert JOB.apply(final, "cancel") == (final, ())  # returned unchanged
    assert not JOB.can("queued", "flag")  # content is flagged only while rendering


@pytest.mark.parametrize("m, src, event, dst, effects", list(_all_rows()))
def test_every_row(m, src, event, dst, effects):
    assert m.can(src, event)
    new_state, got = m.apply(src, event)
    assert new_state == dst
    assert got == effects
    assert isinstance(got, tuple) and all(isinstance(e, str) for e in got)


@pytest.mark.parametrize("m, src, event", list(_illegal_pairs()))
def test_every_illegal_pair_raises_and_changes_nothing(m, src, event):
    before = dict(m.table)
    state = src
    assert not m.can(state, event)
    with pytest.raises(IllegalTransition) as info:
        state, _ = m.apply(state, event)
    assert state == src
    assert dict(m.table) == before
    err = info.value
    assert (err.machine, err.state, err.event) == (m.name, src, event)
    assert m.name in str(err) and event in str(err)


@pytest.mark.parametrize(
    "m, src, event",
    [
        (HOLD, "captured", "release"),
        (HOLD, "released", "capture"),
        (TOPUP, "expired", "confirm"),
        (TICKET, "closed", "customer_reply"),
        (TICKET, "closed", "support_reply"),
        (TICKET, "closed", SET_STATE + "open"),
        (STEP, "completed", "cancel"),
        (RUN, "completed", "step_failed"),
        (JOB, "canceled", "finish"),
        (JOB, "queued", "render_ended"),
    ],
)
def test_named_illegal_pairs(m, src, event):
    with pytest.raises(IllegalTransition):
        m.apply(src, event)


@pytest.mark.parametrize("m", ALL, ids=lambda m: m.name)
def test_finals_are_final(m):
    for (src, event), (dst, effects) in m.table.items():
        if not m.is_final(src):
            continue
        if dst != src:
            assert (m.name, src, event) in REOPEN_ROWS, f"{m.name}: {src}+{event} leaves a final state"
        elif effects:
            assert (m.name, src, event) in FINAL_SELF_ROWS_WITH_EFFECTS, f"{m.name}: {src}+{event} has effects"


@pytest.mark.parametrize("m", ALL, ids=lambda m: m.name)
def test_every_state_is_reachable(m):
    # Created by a NEW row, or created directly in the spec's initial state.
    initial = {"job": "queued", "run": "queued", "step": "pending", "low_balance": "armed", "ticket": "open"}
    starts = {NEW} if any(src is NEW for (src, _) in m.table) else {initial[m.name]}
    seen = set(starts)
    frontier = list(starts)
    while frontier:
        s = frontier.pop()
        for (src, _), (dst, _) in m.table.items():
            if src == s and dst not in seen:
                seen.add(dst)
                frontier.append(dst)
    assert m.states <= seen - {NEW}


def test_ticket_transition_to():
    assert TICKET.transition_to("open", "resolved") == ("resolved", ("state_changed",))
    assert TICKET.transition_to("resolved", "closed") == ("closed", ("state_changed",))
    assert TICKET.transition_to("triaging", "triaging") == ("triaging", ())
    assert TICKET.transition_to("closed", "closed") == ("closed", ())
    for target in _TICKET_LIVE:
        with pytest.raises(IllegalTransition):
            TICKET.transition_to("closed", target)
    with pytest.raises(IllegalTransition):
        TICKET.transition_to("open", "no_such_state")


def test_walks():
    def run(m, state, *events):
        effects = []
        for e in events:
            state, eff = m.apply(state, e)
            effects.extend(eff)
        return state, effects

    assert run(JOB, "queued", "start", "cancel", "render_ended", "render_ended") == (
        "canceled", ["render", "release", "discard_render", "webhook", "webhook"])
    assert run(HOLD, NEW, "place", "capture", "capture") == ("captured", ["reserve", "charge"])
    assert run(TOPUP, NEW, "checkout_started", "confirm", "confirm") == ("paid", ["add_lot"])
    # Once per crossing; rising does not re-arm, PUT does.
    assert run(LOW_BALANCE, "armed", "below", "below", "above", "below") == ("notified", ["notify"])
    assert run(LOW_BALANCE, "notified", "settings_put", "below") == ("notified", ["check_now", "notify"])
    assert run(TICKET, "open", "support_reply", "support_reply", "customer_reply") == (
        "open", ["replied", "state_changed", "replied", "state_changed"])


def test_unhashable_input_is_illegal_not_a_crash():
    assert not JOB.can(["queued"], "start")  # type: ignore[arg-type]
    with pytest.raises(IllegalTransition):
        JOB.apply(["queued"], "start")  # type: ignore[arg-type]


def test_machines_are_immutable():
    with pytest.raises(TypeError):
        JOB.table[("queued", "start")] = ("completed", ())  # type: ignore[index]
    with pytest.raises(AttributeError):
        JOB.name = "other"
    assert JOB.apply("queued", "start") == ("rendering", ("render",))


@pytest.mark.parametrize(
    "states, final, table",
    [
        (["a", "a"], [], {}),
        (["a"], ["b"], {}),
        (["a"], [], {("x", "go"): ("a", ())}),
        (["a"], [], {("a", "go"): ("x", ())}),
        (["a"], [], {("a", ""): ("a", ())}),
        (["a"], [], {("a", "go"): ("a", "effect")}),
        (["a"], [], {("a", "go"): ("a", ("",))}),
    ],
)
def test_bad_tables_are_rejected(states, final, table):
    with pytest.raises(ValueError):
        Machine("bad", states, final, table)


def test_machine_accepts_new_rows():
    m = Machine("m", ["a", "b"], ["b"], {(NEW, "make"): ("a", ["x"]), ("a", "go"): ("b", ())})
    assert m.apply(NEW, "make") == ("a", ("x",))
    assert m.events == {"make", "go"}
    assert list(itertools.chain.from_iterable(e for _, e in m.table.values())) == ["x"]
