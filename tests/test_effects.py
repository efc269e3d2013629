"""Every effect in the JOB, RUN, STEP and TICKET tables (service/machines.py) has a handler on the
actor that owns the machine, and no handler names an effect the table does not have: the
table drives what the actor does (service/actors/effects.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from service.actors.effects import EffectHandlers, Step, effects_of
from service.actors.jobs.effects import JOB_EFFECTS, SETTLE_EFFECT, JobEffects, JobFacts
from service.actors.jobs.messages import RenderHandle
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
    step = bound.apply(Probe(), "rendering", "cancel", {"why": "test"})
    assert seen == [("b", ("release", "discard_render")), ("a", "rendering", "canceled", {"why": "test"})]
    assert (step.new, step.fields) == ("canceled", {"x": 1})


def test_a_move_gets_the_bindings_fresh_facts_unless_the_actor_names_them():
    @dataclass
    class Facts:
        note: str = "fresh"

    class Probe:
        def a(self, step: Step[Facts]) -> None:
            step.facts.note += "+seen"

        b = a

    handlers = {"render": "a", "capture": "b", "release": "b", "webhook": "b", "discard_render": "a"}
    bound = EffectHandlers(JOB, Probe, handlers, facts=Facts)
    first, second = bound.apply(Probe(), "queued", "start"), bound.apply(Probe(), "queued", "start")
    assert first.facts == second.facts == Facts("fresh+seen") and first.facts is not second.facts
    assert bound.apply(Probe(), "queued", "start", Facts("mine")).facts == Facts("mine+seen")
    with pytest.raises(TypeError, match="job effects: a move needs its facts"):
        EffectHandlers(JOB, Probe, handlers).step("queued", "start")


def test_the_job_webhook_row_state_is_a_typed_fact():
    """A cancel while rendering keeps the webhook row waiting for the render's end; a final
    move with no render running writes it pending; a render start writes none."""

    class Job(JobEffects):
        def __init__(self, rendering: bool) -> None:
            self.render = RenderHandle() if rendering else None

    assert JOB_EFFECTS.apply(Job(True), "rendering", "cancel").facts == JobFacts("waiting")
    assert JOB_EFFECTS.apply(Job(False), "rendering", "cancel").facts == JobFacts("pending")
    assert JOB_EFFECTS.apply(Job(False), "rendering", "fail").facts == JobFacts("pending")
    assert JOB_EFFECTS.apply(Job(False), "queued", "start").facts == JobFacts(None)


def test_a_hold_is_settled_as_the_row_into_its_final_status_says():
    assert SETTLE_EFFECT == {"completed": "capture", "failed": "release", "nsfw": "release", "canceled": "release"}
