"""What a submit means, checked in the spec's fixed order, before any credit moves.

Order: model -> availability -> prompt -> aspect_ratio -> resolution ->
duration -> quality -> inputs -> price. A body broken in two ways reports the
earlier rule. The project is resolved (and the balance checked) by the caller.

Decisions where the spec is open:
- Scope of a model id: on the capability route only that capability's models
  are known (a model of another capability is "Unknown model", and `Known:`
  lists the capability's models). On the model route the path names the
  model among all models; a body `model` naming a different model is unknown
  for that route (`Known:` is the path's model).
- With `model` omitted, the capability's first model whose backend runs here
  is used; when none runs, the first model's 503 is reported.
- `aspect_ratio` on a capability whose list is empty: `<capability> has no
  aspect_ratio setting.`; omitted: None (the backend picks: square for a new
  image, the input's shape otherwise).
- `duration` on a model that takes none: `<model> has no duration setting.`
- An unknown slot name: `<capability> on <model>: unknown slot '<slot>'.
  Known: <slots or none>.`, reported before counts.
- Inside `inputs`: unknown slot, counts, then values that are not ours, then
  missing/other-project assets, then kinds.
- A prompt over the capability's `prompt_max_chars` (10,000 today):
  `prompt must be at most <max> characters; got <n>.` (after the empty check).
- Lists in messages are comma-separated (`must be one of 1k, 2k.`).
- An unknown capability in the route is 404 `request.not_found`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.errors import NotFound, Unavailable, Unprocessable
from service.money import fmt

from .assets import NOT_OURS, AssetInfo, ResolveInputs, find_assets, kinds_text, parse_asset_ref
from .capabilities import BY_ID, Capability
from .catalog import Catalog, Model, Runnable
from .request import JobSettings, SubmitRequest
from .work import check_video_inputs, render_budget

if TYPE_CHECKING:  # the shapes read the catalog's names: imported for mypy only
    from service.views import catalog_shapes as shapes

__all__ = ["AssetInfo", "JobSettings", "Plan", "SubmitRequest", "estimate", "parse_asset_ref", "plan_submit"]


@dataclass(frozen=True)
class Plan:
    """A submit that passed every rule: what to render (the job row's columns and its
    `settings`) and what it costs."""

    capability: str
    model: str
    backend: str
    prompt: str
    price_uc: int
    settings: JobSettings

    @property
    def credits(self) -> str:
        return fmt(self.price_uc)


def plan_submit(
    catalog: Catalog,
    *,
    capability: str | None,
    model: str | None,
    request: SubmitRequest,
    runnable: Runnable,
    resolve_inputs: ResolveInputs,
    project_id: str,
    base_url: str | None,
) -> Plan:
    """Validate a submit for the capability route (`capability`) or the model route (`model`).

    `project_id` is the resolved project (input assets must be in it);
    `base_url` lets asset URLs of this API count as inputs.
    """
    return _plan(
        catalog, capability, model, request, runnable,
        inputs_check=(resolve_inputs, project_id, base_url),
    )


def estimate(
    catalog: Catalog,
    *,
    capability: str | None,
    model: str | None,
    request: SubmitRequest,
    runnable: Runnable,
) -> shapes.Estimate:
    """`POST /v1/generation/estimate`: the submit's price without creating anything.

    Runs the submit rules except the prompt and inputs (a price check needs
    neither), so an unknown model, an unavailable one or a bad tier answer as
    the submit would. Without `capability` or `model` (the route's), the
    request's `model` names it. Answers `{capability, model, resolution,
    duration, credits, tier}`.
    """
    if capability is None and model is None:
        model = request.model
    if capability is None and model is None:
        raise Unprocessable("capability or model is required.", {"field": "capability"})
    plan = _plan(catalog, capability, model, request, runnable, inputs_check=None)
    s = plan.settings
    return {
        "capability": plan.capability,
        "model": plan.model,
        "resolution": s.resolution,
        "duration": s.duration,
        "credits": plan.credits,
        "tier": s.tier,
    }


InputsCheck = tuple[ResolveInputs, str, str | None]  # (resolve_inputs, project_id, base_url)


def _plan(catalog: Catalog, capability: str | None, model_id: str | None, request: SubmitRequest,
          runnable: Runnable, inputs_check: InputsCheck | None) -> Plan:
    m = _choose_model(catalog, capability, model_id, request.model, runnable)
    if not runnable(m):
        raise Unavailable(f"Model {m.id} is not available on this deployment.", {"model": m.id})
    cap = BY_ID[m.capability]
    prompt = request.prompt or ""
    if inputs_check is not None and cap.prompt_required and not prompt.strip():
        raise Unprocessable("prompt is required.", {"field": "prompt"})
    if inputs_check is not None and len(prompt) > cap.prompt_max_chars:
        raise Unprocessable(f"prompt must be at most {cap.prompt_max_chars} characters; got {len(prompt)}.",
                            {"field": "prompt", "max_length": cap.prompt_max_chars, "length": len(prompt)})
    aspect_ratio = _aspect_ratio(cap, request.aspect_ratio)
    resolution = _resolution(m, request.resolution)
    duration = _duration(m, request.duration)
    if request.quality is not None:
        raise Unprocessable(f"{m.id} has no quality setting.", {"field": "quality", "model": m.id})
    inputs, infos = _inputs(cap, m, request.inputs or {}, *inputs_check) if inputs_check else ({}, {})
    _output_size(m, resolution, infos)
    check_video_inputs(m, resolution, infos)
    price = m.price_uc(resolution, duration)
    if price is None:
        raise Unavailable(
            f"Model {m.id} has no price for this tier and cannot be run.",
            {"capability": cap.id, "model": m.id, "resolution": resolution, "duration": duration},
        )
    settings = JobSettings(
        resolution=resolution, duration=duration, aspect_ratio=aspect_ratio, inputs=inputs,
        seed=_seed(request.seed), timeout_s=render_budget(m, resolution, infos),
    )
    return Plan(capability=cap.id, model=m.id, backend=m.backend, prompt=prompt, price_uc=price, settings=settings)


SEED_MAX = 2 ** 31 - 1  # the API's own bound on `seed` (routes/generation.py)


def _seed(value: Any) -> int | None:
    """Backends take a whole seed; a product's `number` input may send 12.5 (its whole part is
    used) or 1e308, whose 309 digits no engine takes (ComfyUI's seeds are 64-bit): a whole part
    past the API's bound is taken modulo 2^31, still one seed for one number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return None
    whole = int(value)
    return whole if -SEED_MAX <= whole <= SEED_MAX else whole % (SEED_MAX + 1)


def _unknown(model_id: str, known: list[str]) -> Unprocessable:
    return Unprocessable(
        f"Unknown model '{model_id}'. Known: {_join(known)}.",
        {"model": model_id, "known": known},
    )


def _choose_model(catalog: Catalog, capability: str | None, path_model: str | None, body_model: str | None,
                  runnable: Runnable) -> Model:
    if capability is not None:
        if capability not in BY_ID:
            raise NotFound(f"Unknown capability '{capability}'.", {"capability": capability})
        models = catalog.models_for(capability)
        if not models:
            raise Unprocessable(f"No model implements {capability} yet.", {"capability": capability})
        if body_model is None:
            return next((m for m in models if runnable(m)), models[0])
        chosen = next((m for m in models if m.id == body_model), None)
        if chosen is None:
            raise _unknown(body_model, [m.id for m in models])
        return chosen
    if path_model is None:
        raise ValueError("plan_submit needs a capability or a model")
    chosen = catalog.model(path_model)
    if chosen is None:
        raise _unknown(path_model, [m.id for m in catalog.models])
    if body_model is not None and body_model != path_model:
        raise _unknown(body_model, [path_model])
    return chosen


def _aspect_ratio(cap: Capability, value: str | None) -> str | None:
    if value is None:
        return None
    if not cap.aspect_ratios:
        raise Unprocessable(f"{cap.id} has no aspect_ratio setting.", {"field": "aspect_ratio"})
    if value not in cap.aspect_ratios:
        raise Unprocessable(
            f"aspect_ratio must be one of {_join(cap.aspect_ratios)}.",
            {"field": "aspect_ratio", "allowed": list(cap.aspect_ratios)},
        )
    return value


def _resolution(m: Model, value: str | None) -> str:
    if value is None:
        return m.resolutions[0]
    if value not in m.resolutions:
        raise Unprocessable(
            f"{m.id} resolution must be one of {_join(m.resolutions)}.",
            {"field": "resolution", "model": m.id, "allowed": list(m.resolutions)},
        )
    return value


def _duration(m: Model, value: Any) -> int | None:
    if value is None:
        return m.durations[0] if m.durations else None
    if not m.durations:
        raise Unprocessable(f"{m.id} has no duration setting.", {"field": "duration", "model": m.id})
    seconds = _whole_seconds(value)
    if seconds not in m.durations:
        raise Unprocessable(
            f"{m.id} duration must be one of {_join(m.durations)} seconds.",
            {"field": "duration", "model": m.id, "allowed": list(m.durations)},
        )
    return seconds


def _whole_seconds(value: Any) -> int | None:
    """5 and 5.0 are the same duration; anything else matches no listed duration."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if float(value).is_integer() else None


def _inputs(
    cap: Capability,
    m: Model,
    given: Mapping[str, Sequence[str]],
    resolve_inputs: ResolveInputs,
    project_id: str,
    base_url: str | None,
) -> tuple[dict[str, tuple[str, ...]], Mapping[str, AssetInfo]]:
    where = f"{cap.id} on {m.id}"
    for name in given:
        if m.slot(name) is None:
            known = _join([s.name for s in m.slots]) or "none"
            raise Unprocessable(f"{where}: unknown slot '{name}'. Known: {known}.", {"slot": name})
    values = {s.name: list(given.get(s.name) or []) for s in m.slots}
    for s in m.slots:
        if len(values[s.name]) != s.count:
            raise Unprocessable(
                f"{where}: slot '{s.name}' takes {s.count} asset(s); got {len(values[s.name])}.",
                {"slot": s.name, "expected": s.count, "got": len(values[s.name])},
            )
    ids: dict[str, tuple[str, ...]] = {}
    for s in m.slots:
        parsed = [parse_asset_ref(v, base_url) for v in values[s.name]]
        bad = [v for v, p in zip(values[s.name], parsed) if p is None]
        if bad:
            raise Unprocessable(NOT_OURS, {"slot": s.name, "values": bad})
        ids[s.name] = tuple(p for p in parsed if p is not None)
    infos = find_assets((i for v in ids.values() for i in v), resolve_inputs, project_id)
    for s in m.slots:
        wrong = [i for i in ids[s.name] if infos[i].kind not in s.kinds]
        if wrong:
            raise Unprocessable(
                f"Input slot '{s.name}' takes {kinds_text(s.kinds)} assets.",
                {"slot": s.name, "kinds": list(s.kinds), "asset_ids": wrong},
            )
    return ids, infos


SCALE = re.compile(r"^([1-9][0-9]*)x$")


def _output_size(m: Model, resolution: str, infos: Mapping[str, AssetInfo]) -> None:
    """An upscale whose output would exceed the model's `max_output_pixels` is refused here,
    before any hold: the output size is known from the input's size and the factor (the
    resolution `2x`), and an unbounded one takes the node's memory."""
    factor = SCALE.match(resolution)
    if m.max_output_pixels is None or factor is None:
        return
    f = int(factor.group(1))
    for info in infos.values():
        if info.width is None or info.height is None:
            continue
        width, height = info.width * f, info.height * f
        if width * height > m.max_output_pixels:
            raise Unprocessable(
                f"{m.id} output would be {width}x{height} pixels; the limit is {m.max_output_pixels} pixels.",
                {"model": m.id, "asset_id": info.id, "output_width": width, "output_height": height,
                 "max_output_pixels": m.max_output_pixels})


def _join(items: Iterable[object]) -> str:
    return ", ".join(str(i) for i in items)
