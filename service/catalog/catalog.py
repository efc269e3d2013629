"""The model catalog: which models exist, what they take, what each tier costs.

Loaded from TOML (`default.toml` in this package unless the operator gives
another file) and then read-only: a reload (service/reload.py) builds a new
Catalog and swaps it in whole. Whether a model can run *here* is not
catalog data: it depends on the backends present, so every view takes a
`runnable(backend_name) -> bool` callback from the caller.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from pydantic import ValidationError

from service.money import fmt, to_uc

from .capabilities import BY_ID, CAPABILITIES
from .engines import NO_ENGINES, EngineConfigError, EngineTable, EngineTables, held_connections, parse_engine
from .schema import CatalogFile, ModelEntry, tier_label

if TYPE_CHECKING:  # the shapes read the catalog's names: imported for mypy only
    from service.views import catalog_shapes as shapes

Runnable = Callable[["Model"], bool]


class CatalogError(ValueError):
    """The catalog file is missing, not TOML, or breaks a rule; the message says where."""


@dataclass(frozen=True)
class ModelSlot:
    """A model's asset slot: the exact number of assets it takes."""

    name: str
    kinds: tuple[str, ...]
    count: int

    def view(self) -> shapes.ModelSlot:
        """`{name, kinds, count, required}` as listed in an offering's `inputs`; `required`:
        this model refuses a submit without the slot's assets."""
        return {"name": self.name, "kinds": list(self.kinds), "count": self.count, "required": self.count > 0}


@dataclass(frozen=True)
class Price:
    resolution: str
    duration: int | None
    uc: int

    def view(self) -> shapes.Price:
        """`{resolution, duration, credits}`; credits a 2-place decimal string."""
        return {"resolution": self.resolution, "duration": self.duration, "credits": fmt(self.uc)}


@dataclass(frozen=True)
class Model:
    id: str
    capability: str
    backend: str
    description: str | None
    resolutions: tuple[str, ...]
    durations: tuple[int, ...]
    concurrency: int
    slots: tuple[ModelSlot, ...]
    prices: tuple[Price, ...]  # in tier order: resolutions x durations
    max_output_pixels: int | None = None  # media.upscale: the largest output it makes
    timeout_s: int = 600  # a render that has no outcome after this long fails
    max_input_seconds: float | None = None  # longest video input, checked at submit
    max_input_frames: int | None = None  # most frames of a video input, checked at submit
    timeout_s_per_megapixel: float | None = None  # video input: render budget per output MP x frame
    min_timeout_s: int = 60  # floor of that budget
    engine: EngineTable | None = None  # the engine outside the node that serves it; None: built in

    @property
    def servers(self) -> int:
        """How many engine servers share the model's jobs (1 for everything else)."""
        return len(getattr(self.engine, "urls", ())) or 1

    def slot(self, name: str) -> ModelSlot | None:
        return next((s for s in self.slots if s.name == name), None)

    def price_uc(self, resolution: str, duration: int | None) -> int | None:
        """Price of one tier in micro-credits, or None when the tier has no price."""
        for p in self.prices:
            if p.resolution == resolution and p.duration == duration:
                return p.uc
        return None

    @classmethod
    def from_entry(cls, e: ModelEntry, base_dir: Path = Path("."), engines: EngineTables = NO_ENGINES) -> Model:
        cap = BY_ID[e.capability]
        engine = parse_engine(e.id, e.backend, tuple(s.name for s in cap.inputs), e.engine, base_dir, engines)
        slots = tuple(
            ModelSlot(s.name, s.kinds, e.slots.get(s.name, s.max)) for s in cap.inputs
        )
        by_tier = {(p.resolution, p.duration): to_uc(p.credits) for p in e.prices}
        durations: tuple[int | None, ...] = tuple(e.durations) or (None,)
        prices = tuple(
            Price(r, d, by_tier[(r, d)])
            for r in e.resolutions
            for d in durations
            if (r, d) in by_tier
        )
        return cls(
            id=e.id,
            capability=e.capability,
            backend=e.backend,
            description=e.description,
            resolutions=tuple(e.resolutions),
            durations=tuple(e.durations),
            concurrency=e.concurrency,
            slots=slots,
            prices=prices,
            max_output_pixels=e.max_output_pixels,
            timeout_s=e.timeout_s,
            max_input_seconds=e.max_input_seconds,
            max_input_frames=e.max_input_frames,
            timeout_s_per_megapixel=e.timeout_s_per_megapixel,
            min_timeout_s=e.min_timeout_s,
            engine=engine,
        )


class Catalog:
    """Models in file order; a capability's models keep that order (the default order)."""

    def __init__(self, models: Iterable[Model], source: str = "<memory>") -> None:
        self.models: tuple[Model, ...] = tuple(models)
        self.source = source
        self._by_id = {m.id: m for m in self.models}

    def model(self, model_id: str) -> Model | None:
        return self._by_id.get(model_id)

    def models_for(self, cap_id: str) -> list[Model]:
        return [m for m in self.models if m.capability == cap_id]

    def capabilities_view(self, runnable: Runnable) -> list[shapes.Capability]:
        """Items of `GET /v1/generation/capabilities`, in the spec's fixed order.

        Each: `{id, description, output, prompt_required, prompt_meaning,
        inputs: [{name, kinds, min, max}], aspect_ratios: [str],
        models: [Offering]}` where an Offering is `{id, description, available,
        resolutions, durations, inputs: [{name, kinds, count}],
        prices: [{resolution, duration, credits}]}`. `available` is whether
        the model's backend runs on this deployment; `duration` is null for
        models without durations; a tier without a price is not listed.
        """
        return [
            {
                "id": c.id,
                "description": c.description,
                "output": c.output,
                "prompt_required": c.prompt_required,
                "prompt_meaning": c.prompt_meaning,
                "inputs": [s.view() for s in c.inputs],
                "aspect_ratios": list(c.aspect_ratios),
                "models": [self._offering(m, runnable) for m in self.models_for(c.id)],
            }
            for c in CAPABILITIES
        ]

    def models_view(self, runnable: Runnable) -> list[shapes.Model]:
        """Items of `GET /v1/generation/models`, in catalog order.

        Each: `{id, description, available, capabilities: [{id, prices:
        [{resolution, duration, credits}]}]}`; one capability per model today.
        Slots are not in this view (the spec keeps them in the capabilities list).
        """
        return [
            {
                "id": m.id,
                "description": m.description,
                "available": bool(runnable(m)),
                "capabilities": [{"id": m.capability, "prices": [p.view() for p in m.prices]}],
            }
            for m in self.models
        ]

    @staticmethod
    def _offering(m: Model, runnable: Runnable) -> shapes.Offering:
        return {
            "id": m.id,
            "description": m.description,
            "available": bool(runnable(m)),
            "resolutions": list(m.resolutions),
            "durations": list(m.durations),
            "inputs": [s.view() for s in m.slots],
            "prices": [p.view() for p in m.prices],
        }


def loads_catalog(text: str, source: str = "<string>", base_dir: Path | None = None,
                  engines: EngineTables = NO_ENGINES) -> Catalog:
    """Parse and validate catalog TOML text; raises CatalogError naming the bad key.
    Engine workflow files are read relative to `base_dir` (the catalog file's folder).
    `engines` names the engine backends and their `[models.engine]` tables (the node
    passes `service.engines.table.tables()`); without it every backend is built in."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CatalogError(f"{source}: not valid TOML: {e}") from None
    try:
        parsed = CatalogFile.model_validate(raw)
    except ValidationError as e:
        raise CatalogError(f"{source}: invalid catalog:\n{_explain(e)}") from None
    try:
        models = [Model.from_entry(m, base_dir or Path("."), engines) for m in parsed.models]
    except EngineConfigError as e:
        raise CatalogError(f"{source}: {e}") from None
    if (problem := held_connections(models)) is not None:
        raise CatalogError(f"{source}: {problem}")
    return Catalog(models, source=source)


def load_catalog(path: str | None = None, engines: EngineTables = NO_ENGINES) -> Catalog:
    """Load the operator's catalog file, or the one shipped in this package when None."""
    if path is None:
        ref = resources.files(__package__).joinpath("default.toml")
        return loads_catalog(ref.read_text(encoding="utf-8"), source="default.toml", engines=engines)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CatalogError(f"{path}: cannot read catalog: {e.strerror or e}") from None
    return loads_catalog(text, source=path, base_dir=Path(path).resolve().parent, engines=engines)


def _explain(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"  {loc or '(top level)'}: {msg}")
    return "\n".join(lines)


__all__ = [
    "Catalog", "CatalogError", "Model", "ModelSlot", "Price", "Runnable",
    "load_catalog", "loads_catalog", "tier_label",
]
