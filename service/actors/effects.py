"""The effects column of a lifecycle table (service/machines.py) bound to an actor's handlers.

An actor applies an event (`Machine.apply`), then hands every effect of the row to the
handler bound to its name (`EffectHandlers.run`): what a transition does is read from the
table, not decided again beside it. A handler contributes to a `Step`: fields to commit with
the new state (in the same transaction) and work to do after that commit, in order.

What the actor tells its handlers about a move, and what a handler tells the actor back, is
the step's `facts`: one small dataclass per binding (`EffectHandlers[F]`), so the names both
sides read are checked by mypy, not matched as strings.

`EffectHandlers` checks when it is made that every effect of its machine has a handler and
every handler is a method of the actor, so a new effect in a table cannot go unhandled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Generic, Mapping, TypeVar

from service.machines import Machine

F = TypeVar("F")


def effects_of(machine: Machine) -> frozenset[str]:
    """Every effect name in the machine's table."""
    return frozenset(e for _, effects in machine.table.values() for e in effects)


@dataclass
class Step(Generic[F]):
    """One applied transition: its states, its facts, what the handlers add to its commit,
    and what runs after it."""

    old: str | None
    new: str
    effects: tuple[str, ...]
    facts: F  # actor <-> handlers: the binding's facts dataclass
    fields: dict[str, Any] = field(default_factory=dict)
    after: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)


async def after(step: Step[Any]) -> None:
    """The work the handlers left for after the step's commit, in order."""
    for work in step.after:
        await work()


class EffectHandlers(Generic[F]):
    """effect name -> name of the actor method handling it (`method(step)`, synchronous).
    `facts` makes the facts of a move the actor names none for (a binding without it must
    be given them on every move)."""

    def __init__(self, machine: Machine, actor_cls: type, handlers: Mapping[str, str], *,
                 facts: Callable[[], F] | None = None) -> None:
        missing = effects_of(machine) - set(handlers)
        unknown = set(handlers) - effects_of(machine)
        absent = [m for m in handlers.values() if not callable(getattr(actor_cls, m, None))]
        if missing or unknown or absent:
            raise ValueError(f"{machine.name} effects: missing {sorted(missing)}, unknown {sorted(unknown)}, "
                             f"no method {absent}")
        self.machine = machine
        self.actor_cls = actor_cls
        self.handlers = dict(handlers)
        self.new_facts = facts

    def apply(self, actor: Any, state: str | None, event: str, facts: F | None = None) -> Step[F]:
        """Apply `event` and let each effect's handler fill the step (nothing is written)."""
        step = self.step(state, event, facts)
        self.run(actor, step)
        return step

    def step(self, state: str | None, event: str, facts: F | None = None) -> Step[F]:
        """Only the transition (IllegalTransition when the table has no row); the handlers
        run later with `run`, e.g. after the write they follow in the same transaction."""
        new, effects = self.machine.apply(state, event)
        if facts is None:
            if self.new_facts is None:
                raise TypeError(f"{self.machine.name} effects: a move needs its facts")
            facts = self.new_facts()
        return Step(state, new, effects, facts)

    def run(self, actor: Any, step: Step[F]) -> None:
        for effect in step.effects:
            getattr(actor, self.handlers[effect])(step)
