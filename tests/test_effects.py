"""Every effect in the lifecycle tables (service/machines.py) has a handler on the owner of the
machine (an actor, or the credit book), no handler names an effect the table does not have, each
machine is bound exactly once, and no module applies a table beside its binding: the table
drives what the owner does (service/effects.py)."""

from __future__ import annotations

import ast
import functools
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from service import machines
from service.actors.jobs.actor import JobActor
from service.actors.jobs.effects import JOB_EFFECTS, SETTLE_EFFECT, JobEffects, JobFacts
from service.actors.jobs.messages import RenderHandle
from service.actors.runs.actor import RunActor
from service.actors.runs.effects import RUN_EFFECTS, STEP_EFFECTS
from service.actors.tickets import TICKET_EFFECTS, TicketsActor
from service.credits.book import HOLD_EFFECTS, LOW_BALANCE_EFFECTS, CreditBook
from service.effects import EffectHandlers, Step, effects_of
from service.machines import HOLD, JOB, LOW_BALANCE, RUN, STEP, TICKET, TOPUP
from service.payments.actor import TOPUP_EFFECTS, TopupActor

ROOT = Path(__file__).resolve().parent.parent
SERVICE = ROOT / "service"
BINDING_MODULE = "service/effects.py"  # the one place a table is applied


@pytest.mark.parametrize("bound, machine, owner", [
    (JOB_EFFECTS, JOB, JobActor), (RUN_EFFECTS, RUN, RunActor), (STEP_EFFECTS, STEP, RunActor),
    (TICKET_EFFECTS, TICKET, TicketsActor), (HOLD_EFFECTS, HOLD, CreditBook),
    (LOW_BALANCE_EFFECTS, LOW_BALANCE, CreditBook), (TOPUP_EFFECTS, TOPUP, TopupActor),
])
def test_every_effect_has_a_handler(bound, machine, owner):
    assert bound.machine is machine and issubclass(owner, bound.owner_cls)
    assert set(bound.handlers) == effects_of(machine) != set()
    for effect, method in bound.handlers.items():
        assert callable(getattr(owner, method)), (effect, method)


# -- every table bound exactly once, and only through its binding --------------------------------------
@functools.cache
def _service() -> tuple[tuple[str, ast.Module], ...]:
    """Every module of service/ parsed once: (path from the repository root, tree)."""
    return tuple((str(p.relative_to(ROOT)), ast.parse(p.read_text(), str(p))) for p in sorted(SERVICE.rglob("*.py")))


def _sources(extra: dict[str, str]) -> list[tuple[str, ast.Module]]:
    """service/ and the `extra` modules (path -> text) the probes below add."""
    return [*_service(), *((path, ast.parse(text, path)) for path, text in extra.items())]


def _is_binding(call: ast.AST) -> bool:
    return isinstance(call, ast.Call) and (
        (isinstance(call.func, ast.Name) and call.func.id == "EffectHandlers")
        or (isinstance(call.func, ast.Attribute) and call.func.attr == "EffectHandlers"))


def _assigned(stmt: ast.stmt) -> tuple[ast.AST | None, str]:
    """`NAME = value` or `NAME: T = value` at module level -> (value, NAME)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.value, stmt.targets[0].id
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return stmt.value, stmt.target.id
    return None, ""


def bindings(extra: dict[str, str] | None = None) -> dict[str, list[str]]:
    """machine name -> where it is bound (`module.NAME`): every `EffectHandlers(...)` in
    service/, found in the source and then imported to read which machine it binds. A
    binding anywhere but a module-level `NAME = EffectHandlers(...)` fails here."""
    out: dict[str, list[str]] = {}
    for path, tree in _sources(extra or {}):
        top = {id(value): name for value, name in map(_assigned, tree.body) if _is_binding(value)}
        for node in ast.walk(tree):
            if not _is_binding(node):
                continue
            assert id(node) in top, f"{path}:{node.lineno}: a binding made outside a module-level NAME = ..."
            module = path.removesuffix(".py").replace("/", ".")
            bound = getattr(importlib.import_module(module), top[id(node)])
            assert isinstance(bound, EffectHandlers), (path, top[id(node)])
            out.setdefault(bound.machine.name, []).append(f"{module}.{top[id(node)]}")
    return out


def test_every_machine_with_effects_is_bound_exactly_once():
    found = bindings()
    with_effects = {m.name for m in machines.ALL if effects_of(m)}
    assert with_effects == {"job", "run", "step", "hold", "topup", "low_balance", "ticket"}
    assert {name: where for name, where in found.items() if len(where) != 1} == {}
    assert set(found) == with_effects


def _machine_names() -> set[str]:
    return {name for name in machines.__all__ if isinstance(getattr(machines, name), machines.Machine)}


def applied_by_hand(extra: dict[str, str] | None = None) -> list[str]:
    """`X.apply(...)` / `X.transition_to(...)` on a machine (`HOLD.apply`, `machines.JOB.apply`,
    `bound.machine.apply`) outside service/effects.py and the machines themselves, and dict
    displays naming every effect of a table (a hand-made effect -> handler table)."""
    names = _machine_names()
    tables = {m.name: effects_of(m) for m in machines.ALL}
    found = []
    for path, tree in _sources(extra or {}):
        if path in (BINDING_MODULE, "service/machines.py"):
            continue
        bound_args = {id(a) for node in ast.walk(tree) if _is_binding(node) for a in node.args}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("apply", "transition_to")):
                target = node.func.value
                label = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
                if label in names or label == "machine":
                    found.append(f"{path}:{node.lineno}: {label}.{node.func.attr}")
            elif isinstance(node, ast.Dict) and id(node) not in bound_args:
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                for name, effects in tables.items():
                    if effects and effects <= keys:
                        found.append(f"{path}:{node.lineno}: a dict of every {name} effect")
    return found


def test_no_module_applies_a_table_beside_its_binding():
    assert applied_by_hand() == []


def test_the_check_sees_a_table_applied_or_dispatched_by_hand():
    """The source checks catch what they are for (a check that cannot fail proves nothing)."""
    probe = ("from service.machines import HOLD, NEW\n"
             "from service import machines\n"
             "HANDLERS = {'reserve': print, 'charge': print, 'unreserve': print}\n"
             "def place(book):\n"
             "    return HOLD.apply(NEW, 'place'), machines.TOPUP.transition_to('pending', 'paid')\n")
    assert applied_by_hand({"by_hand.py": probe}) == ["by_hand.py:3: a dict of every hold effect",
                                                       "by_hand.py:5: HOLD.apply",
                                                       "by_hand.py:5: TOPUP.transition_to"]


def test_a_second_binding_of_a_table_is_found(tmp_path, monkeypatch):
    probe = ("from service.credits.book import CreditBook\n"
             "from service.effects import EffectHandlers\n"
             "from service.machines import LOW_BALANCE\n"
             "AGAIN = EffectHandlers(LOW_BALANCE, CreditBook, {'notify': '_notify', 'check_now': '_check_low'})\n")
    (tmp_path / "effects_bound_twice.py").write_text(probe)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert bindings({"effects_bound_twice.py": probe})["low_balance"] == [
        "service.credits.book.LOW_BALANCE_EFFECTS", "effects_bound_twice.AGAIN"]


def test_a_binding_made_inside_a_function_is_refused():
    probe = ("from service.effects import EffectHandlers\n"
             "def later(m, cls):\n"
             "    return EffectHandlers(m, cls, {})\n")
    with pytest.raises(AssertionError, match=r"inside.py:3: a binding made outside a module-level"):
        bindings({"inside.py": probe})


def test_the_tables_name_these_effects():
    assert effects_of(JOB) == {"render", "capture", "release", "webhook", "discard_render"}
    assert effects_of(RUN) == {"cancel_unfinished", "release_failed", "fill_outputs"}
    assert effects_of(STEP) == {"start", "record_outputs"}
    assert effects_of(HOLD) == {"reserve", "charge", "unreserve"}
    assert effects_of(LOW_BALANCE) == {"notify", "check_now"}
    assert effects_of(TOPUP) == {"add_lot"}


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
