"""Every effect in the JOB, RUN, STEP and TICKET tables (service/machines.py) has a handler on the
actor that owns the machine, and no handler names an effect the table does not have: the
table drives what the actor does (service/actors/effects.py)."""

from __future__ import annotations

import pytest

from service.actors.effects import EffectHandlers, Step, effects_of
from service.actors.jobs.effects import JOB_EFFECTS, SETTLE_EFFECT
from service.actors.jobs.actor import JobActor
from service.actors.runs.effects import RUN_EFFECTS, STEP_EFFECTS
from service.actors.runs.actor import RunActor
from service.actors.tickets import TICKET_EFFECTS, TicketsActor
from service.machines import JOB, RUN, STEP, TICKET


@pytest.mark.parametrize("bound, machine, actor", [
    (JOB_EFFECTS, JOB, JobActor), (RUN_EFFECTS, RUN, RunActor), (STEP_EFFECTS, STEP, RunActor),
    (TICKET_EFFECTS, TICKET, TicketsActor),
])
def test_every_effect_has_a_handler(bound, machine, actor):
    assert bound.machine is machine and issubclass(actor, bound.actor_cls)
    assert set(bound.handlers) == effects_of(machine) != set()
    for effect, method in bound.handlers.items():
        assert callable(getattr(actor, method)), (effect, method)


def test_the_tables_name_these_effects():
    assert effects_of(JOB) == {"render", "capture", "release", "webhook", "discard_render"}
    assert effects_of(RUN) == {"cancel_unfinished", "release_failed", "fill_outputs"}
    assert effects_of(STEP) == {"start", "record_outputs"}


def test_an_unhandled_or_unknown_effect_is_refused_when_bound():
    with pytest.raises(ValueError, match=r"job effects: missing \['webhook'\]"):
        EffectHandlers(JOB, JobActor, {k: v for k, v in JOB_EFFECTS.handlers.items() if k != "webhook"})
    with pytest.raises(ValueError, match=r"unknown \['bill_twice'\]"):
        EffectHandlers(STEP, RunActor, {**STEP_EFFECTS.handlers, "bill_twice": "_on_step_start"})
    with pytest.raises(ValueError, match=r"no method \['_on_nothing'\]"):
        EffectHandlers(RUN, RunActor, {**RUN_EFFECTS.handlers, "fill_outputs": "_on_nothing"})


def test_apply_hands_each_effect_of_the_row_to_its_handler_in_order():
    seen = []

    class Probe:
        def a(self, step: Step) -> None:
            seen.append(("a", step.old, step.new, step.facts))

        def b(self, step: Step) -> None:
            seen.append(("b", step.effects))
            step.fields["x"] = 1

    bound = EffectHandlers(JOB, Probe, {"render": "a", "capture": "b", "release": "b", "webhook": "b",
                                        "discard_render": "a"})
    step = bound.apply(Probe(), "rendering", "cancel", why="test")
    assert seen == [("b", ("release", "discard_render")), ("a", "rendering", "canceled", {"why": "test"})]
    assert (step.new, step.fields) == ("canceled", {"x": 1})


def test_a_hold_is_settled_as_the_row_into_its_final_status_says():
    assert SETTLE_EFFECT == {"completed": "capture", "failed": "release", "nsfw": "release", "canceled": "release"}
