"""The shape of a product definition: inputs, steps and where each step's parameters come from.

A step's `params` is a small declarative mapping. Values are constants or:

- `FromInput("prompt")`   the run input's value (after defaults and preset-fixed values)
- `FromStep("still")`     the asset ids that step produced (a list)
- `TextOf("script")`      the text that a text step produced
- `Template("... {topic}")` a string filled from run inputs
- a dict of the above, for a capability step's `inputs` slots

For a capability step the resolved params are a submit body (prompt,
aspect_ratio, resolution, duration, seed, inputs), checked by the same rules
as any submit. For an op step they are the op's arguments (see `OPS`).
A step `needs` every step it reads from; steps whose needs are done run at
the same time. Definitions are checked when built, so a typo fails at import.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from string import Formatter
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from .capabilities import BY_ID
from .request import SUBMIT_SETTINGS

if TYPE_CHECKING:  # the shapes read the catalog's names: imported for mypy only
    from service.views import catalog_shapes as shapes

INPUT_TYPES = ("text", "number", "choice", "image", "video", "audio")
ASSET_TYPES = ("image", "video", "audio")
CATEGORIES = ("image", "video", "audio")
KINDS = ("workflow", "preset")

# Free local processing: op name -> its parameters.
#   extract_frame(video: asset ids, at: "first" | "middle" | "last") -> one image
#   resize_image(image: asset ids, max_side: px) -> one image, longest side max_side
OPS: dict[str, tuple[str, ...]] = {
    "extract_frame": ("video", "at"),
    "resize_image": ("image", "max_side"),
}


@dataclass(frozen=True)
class FromInput:
    name: str


@dataclass(frozen=True)
class FromStep:
    key: str


@dataclass(frozen=True)
class TextOf:
    key: str


@dataclass(frozen=True)
class Template:
    text: str

    def names(self) -> list[str]:
        return [f for _, f, _, _ in Formatter().parse(self.text) if f]


@dataclass(frozen=True)
class Input:
    type: str
    label: str
    description: str | None = None
    required: bool = False
    default: Any = None
    options: tuple[str, ...] = ()
    hidden: bool = False

    def view(self) -> shapes.ProductInput:
        """`{type, label, description, required, default, options, hidden}`."""
        return {
            "type": self.type, "label": self.label, "description": self.description,
            "required": self.required, "default": self.default,
            "options": list(self.options), "hidden": self.hidden,
        }


@dataclass(frozen=True)
class Step:
    key: str
    capability: str | None = None
    op: str | None = None
    model: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", _frozen(self.params))

    @property
    def needs(self) -> tuple[str, ...]:
        """Keys of the steps this one reads from, in first-use order."""
        return tuple(dict.fromkeys(r.key for r in _refs(self.params) if isinstance(r, (FromStep, TextOf))))

    def view(self) -> shapes.ProductStep:
        """`{key, capability, op, model, needs}`."""
        return {
            "key": self.key, "capability": self.capability, "op": self.op,
            "model": self.model, "needs": list(self.needs),
        }


@dataclass(frozen=True)
class Product:
    slug: str
    name: str
    category: str
    description: str
    version: int
    inputs: Mapping[str, Input]
    steps: tuple[Step, ...]
    outputs: Mapping[str, str]  # output name -> key of the step producing it
    kind: str = "workflow"
    base: str | None = None
    base_version: int | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)  # preset values, not in `inputs`
    thumbnail_url: str | None = None

    def __post_init__(self) -> None:
        # A pinned version must never change under a running run: freeze the mappings.
        for name in ("inputs", "outputs", "fixed"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        object.__setattr__(self, "steps", tuple(self.steps))
        check_definition(self)

    def step(self, key: str) -> Step:
        return next(s for s in self.steps if s.key == key)


def make_preset(
    base: Product, *, slug: str, name: str, description: str, version: int,
    fixed: Mapping[str, Any], thumbnail_url: str | None = None,
) -> Product:
    """A workflow with some inputs fixed; the fixed inputs leave `inputs`.

    The preset copies its base's definition as it is now (`base_version`), so
    when the base gets a new version the preset is published again too.
    """
    for name_, value in fixed.items():
        if name_ not in base.inputs:
            raise ValueError(f"{slug}: fixes {name_!r}, which {base.slug} does not take")
        _check_value(slug, name_, base.inputs[name_], value)
    return replace(
        base, slug=slug, name=name, description=description, version=version, kind="preset",
        base=base.slug, base_version=base.version, thumbnail_url=thumbnail_url,
        inputs={k: v for k, v in base.inputs.items() if k not in fixed},
        fixed={**base.fixed, **fixed},
    )


def check_definition(p: Product) -> None:
    """Refuse a definition that could not run: bad names, forward references, unknown ops."""
    where = f"product {p.slug} v{p.version}"
    if p.category not in CATEGORIES or p.kind not in KINDS or p.version < 1:
        raise ValueError(f"{where}: bad category, kind or version")
    if (p.kind == "preset") != (p.base is not None):
        raise ValueError(f"{where}: a preset, and only a preset, has a base")
    for name, inp in p.inputs.items():
        if inp.type not in INPUT_TYPES:
            raise ValueError(f"{where}: input {name!r} has unknown type {inp.type!r}")
        if (inp.type == "choice") != bool(inp.options):
            raise ValueError(f"{where}: input {name!r}: options are for choice inputs only")
        if inp.default is not None:
            _check_value(where, name, inp, inp.default)
    seen: set[str] = set()
    for s in p.steps:
        if s.key in seen:
            raise ValueError(f"{where}: two steps named {s.key!r}")
        _check_step(where, p, s, seen)
        seen.add(s.key)
    for out, key in p.outputs.items():
        if key not in seen:
            raise ValueError(f"{where}: output {out!r} comes from unknown step {key!r}")


def _check_step(where: str, p: Product, s: Step, earlier: set[str]) -> None:
    if (s.capability is None) == (s.op is None):
        raise ValueError(f"{where}: step {s.key!r} needs exactly one of capability and op")
    if s.capability is not None and s.capability not in BY_ID:
        raise ValueError(f"{where}: step {s.key!r} has unknown capability {s.capability!r}")
    if s.capability is not None and not set(s.params) <= SUBMIT_SETTINGS - {"model"}:
        unknown = ", ".join(sorted(set(s.params) - SUBMIT_SETTINGS))
        raise ValueError(f"{where}: step {s.key!r}: {unknown or 'model'} is not a submit setting (a model is the step's own)")
    if s.op is not None:
        if s.op not in OPS or s.model is not None:
            raise ValueError(f"{where}: step {s.key!r}: unknown op {s.op!r} or a model on an op")
        if set(s.params) != set(OPS[s.op]):
            raise ValueError(f"{where}: step {s.key!r}: {s.op} takes {', '.join(OPS[s.op])}")
    for ref in _refs(s.params):
        if isinstance(ref, (FromStep, TextOf)) and ref.key not in earlier:
            raise ValueError(f"{where}: step {s.key!r} reads {ref.key!r}, not an earlier step")
        names = [ref.name] if isinstance(ref, FromInput) else ref.names() if isinstance(ref, Template) else []
        for n in names:
            if n not in p.inputs and n not in p.fixed:
                raise ValueError(f"{where}: step {s.key!r} reads unknown input {n!r}")


def _check_value(where: str, name: str, inp: Input, value: Any) -> None:
    ok = {
        "text": isinstance(value, str),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        "choice": value in inp.options,
    }.get(inp.type, False)
    if not ok:
        raise ValueError(f"{where}: {value!r} is not a valid value for input {name!r}")


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    return value


def _refs(value: Any) -> Iterator[Any]:
    if isinstance(value, (FromInput, FromStep, TextOf, Template)):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _refs(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _refs(v)
