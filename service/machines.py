"""Every lifecycle in the spec as a table ``(state, event) -> (new_state, effects)``.

Pure data and a tiny interpreter: stdlib only, no I/O, no event loop. States are
the spec's status strings (what gets stored); effects are plain strings the
actors interpret (charge a hold, send a webhook, ...). An event with no row for
the current state raises `IllegalTransition`; since `apply` only computes, the
caller's state is untouched. ``NEW`` (``None``) is the "(new)" pseudo-state of
machines whose creation is itself a transition.

Tables (``state + event -> new_state (effects)``; "self" = same state, no effects):

JOB      queued, rendering, completed*, failed*, nsfw*, canceled*
         queued + start -> rendering (render)
         queued|rendering + finish -> completed (capture, webhook)
         queued|rendering + fail -> failed (release, webhook)
         rendering + flag -> nsfw (release, webhook)
         queued + cancel -> canceled (release)                      no webhook
         rendering + cancel -> canceled (release, discard_render)   webhook comes later:
         canceled + render_ended -> canceled (webhook)              worker ended, output discarded
         final + cancel -> self; final + render_ended -> self (except canceled above)
         rendering + resume -> self (render)                        after a stop: render again
         completed + resume -> self (capture); other final + resume -> self (release)
                                                                    a hold a stop left unsettled
         A worker that reports finish/fail/flag for a job already canceled must be
         turned into ``render_ended`` by the actor; finish on a final job is illegal.
RUN      queued, running, completed*, failed*, canceled*
         queued + start -> running
         queued|running + step_failed -> failed (cancel_unfinished, release_failed)
         queued|running + cancel -> canceled (cancel_unfinished)
         running + all_done -> completed (fill_outputs)
         final + cancel -> self
STEP     pending, running, completed*, failed*, canceled*
         pending + start -> running (start)
         running + finish -> completed (record_outputs)
         pending|running + fail -> failed            pending: e.g. the step's hold got a 402
         pending|running + cancel -> canceled        finished steps are not cancelable:
                                                     the run actor cancels only non-final steps
HOLD     held, captured*, released*
         NEW + place -> held (reserve)
         held + capture -> captured (charge); held + release -> released (unreserve)
         captured + capture -> self; released + release -> self     settles exactly once
         captured + release, released + capture: illegal
TOPUP    pending, paid*, expired*
         NEW + checkout_started -> pending; NEW + checkout_failed -> expired
         pending + confirm -> paid (add_lot); paid + confirm -> self  one lot per top-up
         pending + expire -> expired                checkout abandoned (our addition)
LOW_BALANCE  armed, notified (no final state)
         armed + below -> notified (notify)         email + billing.credits_low + set
                                                    low_balance_notified_at
         notified + below -> self                   once per crossing
         armed|notified + settings_put -> armed (check_now)
         armed + above -> self; notified + above -> self
         Decision: a balance rising back above the threshold does NOT re-arm the
         warning by itself. The spec only names PUT settings as re-arming ("Warning
         re-armed and balance checked immediately"), and ``low_balance_notified_at``
         stays set until then, so a balance that hovers around the threshold cannot
         send a stream of emails. ``above`` exists so actors may report it freely.
TICKET   open, triaging, awaiting_customer, resolved, closed*
         awaiting_customer + customer_reply -> open (state_changed)   (spec)
         resolved + customer_reply -> open (state_changed)            reopen
         open|triaging + customer_reply -> self
         non-closed + support_reply -> awaiting_customer (replied, state_changed),
             but awaiting_customer + support_reply -> awaiting_customer (replied)
         non-closed + set_state:<target> -> target (state_changed); same state -> self;
             closed + set_state:closed -> self. Use `Machine.transition_to`.
         closed is final: a closed ticket takes no replies and cannot be moved.

(* = final.)  `ALL` holds every machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Optional

State = Optional[str]
Effects = tuple[str, ...]
Row = tuple[str, Effects]

NEW: None = None
"""The "(new)" pseudo-state: apply(NEW, event) creates the record."""

SET_STATE = "set_state:"
"""Prefix of the explicit-move events; see `Machine.transition_to`."""


class IllegalTransition(Exception):
    """No row for ``(state, event)`` in machine ``machine`` (the machine's name).

    Raised by `Machine.apply`; nothing was changed. Callers that race (a late
    worker report, a double click) should check `Machine.can` first or catch this.
    """

    def __init__(self, machine: str, state: State, event: str) -> None:
        self.machine = machine
        self.state = state
        self.event = event
        super().__init__(f"{machine}: no transition from {state!r} on {event!r}")


class Machine:
    """A finite state machine given as a table. Immutable; all methods are pure."""

    __slots__ = ("name", "states", "final", "table", "events")

    def __init__(
        self,
        name: str,
        states: Iterable[str],
        final: Iterable[str],
        table: Mapping[tuple[State, str], tuple[str, Iterable[str]]],
    ) -> None:
        states_t = tuple(states)
        self.name = name
        self.states: frozenset[str] = frozenset(states_t)
        self.final: frozenset[str] = frozenset(final)
        if len(self.states) != len(states_t):
            raise ValueError(f"{name}: duplicate state")
        if not self.final <= self.states:
            raise ValueError(f"{name}: final states {sorted(self.final - self.states)} unknown")
        rows: dict[tuple[State, str], Row] = {}
        for (src, event), (dst, effects) in table.items():
            if src is not NEW and src not in self.states:
                raise ValueError(f"{name}: unknown source state {src!r}")
            if dst not in self.states:
                raise ValueError(f"{name}: unknown target state {dst!r}")
            if not isinstance(event, str) or not event:
                raise ValueError(f"{name}: bad event {event!r}")
            effects_t = tuple(effects)
            if isinstance(effects, str) or not all(isinstance(e, str) and e for e in effects_t):
                raise ValueError(f"{name}: effects must be a sequence of names, got {effects!r}")
            rows[(src, event)] = (dst, effects_t)
        self.table: Mapping[tuple[State, str], Row] = MappingProxyType(rows)
        self.events: frozenset[str] = frozenset(e for _, e in rows)

    def __setattr__(self, key: str, value: object) -> None:
        if hasattr(self, key):
            raise AttributeError(f"{type(self).__name__} is immutable")
        object.__setattr__(self, key, value)

    def __repr__(self) -> str:
        return f"<Machine {self.name}: {len(self.states)} states, {len(self.table)} rows>"

    def apply(self, state: State, event: str) -> Row:
        """Return ``(new_state, effects)`` for ``event`` in ``state``, or raise `IllegalTransition`."""
        try:
            return self.table[(state, event)]
        except (KeyError, TypeError):  # TypeError: an unhashable state or event
            raise IllegalTransition(self.name, state, event) from None

    def can(self, state: State, event: str) -> bool:
        try:
            return (state, event) in self.table
        except TypeError:
            return False

    def is_final(self, state: State) -> bool:
        return state in self.final

    def transition_to(self, state: State, target: str) -> Row:
        """An explicit move to ``target`` (event ``set_state:<target>``); same rules as `apply`."""
        return self.apply(state, SET_STATE + target)


def _rows(*groups: tuple[Iterable[State], str, str, Effects]) -> dict[tuple[State, str], tuple[str, Effects]]:
    """Expand ``(sources, event, target, effects)``; a target of ``"="`` means "same as source"."""
    out: dict[tuple[State, str], tuple[str, Effects]] = {}
    for sources, event, target, effects in groups:
        for src in sources:
            key = (src, event)
            if key in out:
                raise ValueError(f"duplicate row {key!r}")
            dst = src if target == "=" else target
            assert dst is not None
            out[key] = (dst, effects)
    return out


# --- generation job ------------------------------------------------------------------

_JOB_FINAL = ("completed", "failed", "nsfw", "canceled")

JOB = Machine(
    "job",
    ("queued", "rendering") + _JOB_FINAL,
    _JOB_FINAL,
    _rows(
        (["queued"], "start", "rendering", ("render",)),
        # Spec: "queued or rendering | render finishes" -> completed.
        (["queued", "rendering"], "finish", "completed", ("capture", "webhook")),
        (["queued", "rendering"], "fail", "failed", ("release", "webhook")),
        (["rendering"], "flag", "nsfw", ("release", "webhook")),
        (["queued"], "cancel", "canceled", ("release",)),
        (["rendering"], "cancel", "canceled", ("release", "discard_render")),
        (["canceled"], "render_ended", "canceled", ("webhook",)),
        (_JOB_FINAL, "cancel", "=", ()),
        (["completed", "failed", "nsfw"], "render_ended", "=", ()),
        # After a stop: a render it interrupted starts again; a hold it left unsettled settles.
        (["rendering"], "resume", "=", ("render",)),
        (["completed"], "resume", "=", ("capture",)),
        (["failed", "nsfw", "canceled"], "resume", "=", ("release",)),
    ),
)

# --- product run and its steps -------------------------------------------------------

_RUN_FINAL = ("completed", "failed", "canceled")

RUN = Machine(
    "run",
    ("queued", "running") + _RUN_FINAL,
    _RUN_FINAL,
    _rows(
        (["queued"], "start", "running", ()),
        (["queued", "running"], "step_failed", "failed", ("cancel_unfinished", "release_failed")),
        (["queued", "running"], "cancel", "canceled", ("cancel_unfinished",)),
        (["running"], "all_done", "completed", ("fill_outputs",)),
        (_RUN_FINAL, "cancel", "=", ()),
    ),
)

_STEP_FINAL = ("completed", "failed", "canceled")

STEP = Machine(
    "step",
    ("pending", "running") + _STEP_FINAL,
    _STEP_FINAL,
    _rows(
        (["pending"], "start", "running", ("start",)),
        (["running"], "finish", "completed", ("record_outputs",)),
        (["pending", "running"], "fail", "failed", ()),
        (["pending", "running"], "cancel", "canceled", ()),
    ),
)

# --- credit hold ---------------------------------------------------------------------

HOLD = Machine(
    "hold",
    ("held", "captured", "released"),
    ("captured", "released"),
    _rows(
        ([NEW], "place", "held", ("reserve",)),
        (["held"], "capture", "captured", ("charge",)),
        (["held"], "release", "released", ("unreserve",)),
        (["captured"], "capture", "=", ()),
        (["released"], "release", "=", ()),
    ),
)

# --- top-up --------------------------------------------------------------------------

TOPUP = Machine(
    "topup",
    ("pending", "paid", "expired"),
    ("paid", "expired"),
    _rows(
        ([NEW], "checkout_started", "pending", ()),
        ([NEW], "checkout_failed", "expired", ()),
        (["pending"], "confirm", "paid", ("add_lot",)),
        (["paid"], "confirm", "=", ()),
        (["pending"], "expire", "expired", ()),
    ),
)

# --- low-balance warning -------------------------------------------------------------

LOW_BALANCE = Machine(
    "low_balance",
    ("armed", "notified"),
    (),
    _rows(
        (["armed"], "below", "notified", ("notify",)),
        (["notified"], "below", "=", ()),
        (["armed", "notified"], "settings_put", "armed", ("check_now",)),
        (["armed", "notified"], "above", "=", ()),
    ),
)

# --- support ticket ------------------------------------------------------------------

_TICKET_STATES = ("open", "triaging", "awaiting_customer", "resolved", "closed")
_TICKET_FINAL = ("closed",)
_TICKET_LIVE = tuple(s for s in _TICKET_STATES if s not in _TICKET_FINAL)


def _ticket_rows() -> dict[tuple[State, str], tuple[str, Effects]]:
    rows = _rows(
        (["awaiting_customer", "resolved"], "customer_reply", "open", ("state_changed",)),
        (["open", "triaging"], "customer_reply", "=", ()),
        ([s for s in _TICKET_LIVE if s != "awaiting_customer"], "support_reply", "awaiting_customer",
         ("replied", "state_changed")),
        (["awaiting_customer"], "support_reply", "awaiting_customer", ("replied",)),
    )
    for src in _TICKET_LIVE:
        for dst in _TICKET_STATES:
            rows[(src, SET_STATE + dst)] = (dst, () if dst == src else ("state_changed",))
    for src in _TICKET_FINAL:
        rows[(src, SET_STATE + src)] = (src, ())
    return rows


TICKET = Machine("ticket", _TICKET_STATES, _TICKET_FINAL, _ticket_rows())

ALL: tuple[Machine, ...] = (JOB, RUN, STEP, HOLD, TOPUP, LOW_BALANCE, TICKET)

__all__ = [
    "ALL", "HOLD", "IllegalTransition", "JOB", "LOW_BALANCE", "Machine", "NEW", "RUN",
    "SET_STATE", "STEP", "TICKET", "TOPUP",
]
