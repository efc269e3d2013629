"""The effects column of a lifecycle table (service/machines.py) bound to its owner's handlers:
the one way a transition's effects are carried out, by the actors and by the credit book alike.

An owner binds every effect its machine names to one of its methods, once, at import
(`EffectHandlers`). The binding checks there that no effect is missing, none is unknown and
every method exists, so a new effect in a table cannot go unhandled; tests/test_effects.py
checks that every machine is bound exactly once and that no module applies a table by hand.

The owner applies an event through its binding and hands the row's effects to their handlers
in the table's order. Actors pass a `Step` (`apply`, or `step` then `run`): a handler adds
fields to commit with the new state and work to do after that commit (`after`). What the
actor tells its handlers about a move, and what a handler tells it back, is the step's
`facts`: one small dataclass per binding (`EffectHandlers[F]`), so both sides are checked by
mypy, not matched as strings. The credit book passes plain values (`transition` then `call`):
no `Step` is made on its hot path, and its bindings have no facts (`EffectHandlers[None]`).

Pure like machines.py: stdlib only, no I/O, no event loop (the money core imports it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from service.machines import Machine, Row, State

F = TypeVar("F")


def effects_of(machine: Machine) -> frozenset[str]:
    """Every effect name in the machine's table."""
    return frozenset(e for _, effects in machine.table.values() for e in effects)


@dataclass
class Step(Generic[F]):
    """One applied transition: its states, its facts, what the handlers add to its commit,
    and what runs after it."""

    old: State
    new: str
    effects: tuple[str, ...]
    facts: F  # owner <-> handlers: the binding's facts dataclass
    fields: dict[str, Any] = field(default_factory=dict)
    after: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)


async def after(step: Step[Any]) -> None:
    """The work the handlers left for after the step's commit, in order."""
    for work in step.after:
        await work()


class EffectHandlers(Generic[F]):
    """effect name -> name of the owner's method handling it (synchronous). `facts` makes the
    facts of a move the owner names none for (a binding without it must be given them on
    every move that makes a `Step`)."""

    def __init__(self, machine: Machine, owner_cls: type, handlers: Mapping[str, str], *,
                 facts: Callable[[], F] | None = None) -> None:
        named = effects_of(machine)
        missing = named - set(handlers)
        unknown = set(handlers) - named
        absent = [m for m in handlers.values() if not callable(getattr(owner_cls, m, None))]
        if missing or unknown or absent:
            raise ValueError(f"{machine.name} effects: missing {sorted(missing)}, unknown {sorted(unknown)}, "
                             f"no method {absent}")
        self.machine = machine
        self.owner_cls = owner_cls
        self.handlers: Mapping[str, str] = dict(handlers)
        self.new_facts = facts
        # ``(new_state, effects)`` of the row, or `IllegalTransition`; nothing runs yet. The
        # machine's own method, not a wrapper: the credit book calls it twice per hold.
        self.transition: Callable[[State, str], Row] = machine.apply

    def __repr__(self) -> str:
        return f"<EffectHandlers of {self.machine.name} by {self.owner_cls.__qualname__}>"

    # -- plain values (the credit book; `transition` above) ---------------------------------------
    def call(self, owner: Any, effects: Iterable[str], *args: Any) -> None:
        """Each effect's handler with `args`, in order."""
        handlers = self.handlers
        for effect in effects:
            getattr(owner, handlers[effect])(*args)

    # -- a Step (the actors) -------------------------------------------------------------------
    def step(self, state: State, event: str, facts: F | None = None) -> Step[F]:
        """Only the transition (IllegalTransition when the table has no row); the handlers
        run later with `run`, e.g. after the write they follow in the same transaction."""
        new, effects = self.machine.apply(state, event)
        if facts is None:
            if self.new_facts is None:
                raise TypeError(f"{self.machine.name} effects: a move needs its facts")
            facts = self.new_facts()
        return Step(state, new, effects, facts)

    def run(self, owner: Any, step: Step[F]) -> None:
        """Each effect's handler fills the step (nothing is written)."""
        self.call(owner, step.effects, step)

    def apply(self, owner: Any, state: State, event: str, facts: F | None = None) -> Step[F]:
        """`step` then `run`."""
        step = self.step(state, event, facts)
        self.run(owner, step)
        return step
