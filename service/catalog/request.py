"""The two typed shapes of a submit on its way to a render: `SubmitRequest`, what a caller
asked for (checked by service/catalog/rules.py), and `JobSettings`, what the rules made of it
(kept as the job row's `params` JSON and read back by the render).

A submit enters in one of four places and each builds a `SubmitRequest` once: the submit
routes from their body (service/http/routes/generation.py), the studio from its form, the
OpenAI front door from its body, a product run's step from its resolved params. The prompt
keeps one form from there to the engine: a `str` on the plan, the job row and the
`RenderRequest`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from .schema import tier_label

__all__ = ["SUBMIT_SETTINGS", "JobSettings", "SubmitRequest"]


@dataclass(frozen=True)
class SubmitRequest:
    """A submit's settings as given, not yet checked; None: not given (the rules pick the
    model's default). The types are what a caller may send; a product step's value of
    another type (a `number` input used as a resolution) still reaches the rules, which
    answer it as any wrong value."""

    prompt: str | None = None
    model: str | None = None
    aspect_ratio: str | None = None
    resolution: str | None = None
    duration: float | None = None  # seconds; a listed one, whole (5 and 5.0 are the same)
    quality: str | None = None  # no model takes it today (422)
    inputs: Mapping[str, Sequence[str]] | None = None  # slot -> asset ids or this API's asset URLs
    seed: float | None = None  # its whole part is used (a product's `number` input may send 12.5)

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> SubmitRequest:
        """From a product step's resolved params (`step_body`). A name that is not a submit
        setting is a bug in the product's definition: ValueError (the step fails)."""
        unknown = sorted(set(params) - SUBMIT_SETTINGS)
        if unknown:
            raise ValueError(f"not submit settings: {', '.join(unknown)}")
        return cls(**params)


SUBMIT_SETTINGS = frozenset(f.name for f in fields(SubmitRequest))  # product definitions are checked against it


@dataclass(frozen=True)
class JobSettings:
    """What a checked submit renders with. Stored as the job's `params` (`to_json`), in
    this field order, with `tier` added for people reading the row; `from_json` reads every
    row ever written: `resolution` has been in each since the first job, any other setting a
    row predates takes its default (`timeout_s` came with the video input bounds)."""

    resolution: str
    duration: int | None = None
    aspect_ratio: str | None = None  # None: the backend picks (square, or the input's shape)
    inputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # every model slot -> asset ids
    seed: int | None = None  # None: one from the job id (`render_seed`)
    timeout_s: int | None = None  # the render's budget from its video inputs; None: the model's

    @property
    def tier(self) -> str:
        return tier_label(self.resolution, self.duration)

    def render_seed(self, job_id: str) -> int:
        """The seed given, else one drawn from the job id: the same after a restart."""
        return self.seed if self.seed is not None else uuid.UUID(job_id).int % (2 ** 31)

    def to_json(self) -> str:
        return json.dumps({
            "resolution": self.resolution, "duration": self.duration, "aspect_ratio": self.aspect_ratio,
            "inputs": {k: list(v) for k, v in self.inputs.items()}, "seed": self.seed, "tier": self.tier,
            "timeout_s": self.timeout_s,
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> JobSettings:
        data: dict[str, Any] = json.loads(text)
        inputs: Mapping[str, Sequence[str]] = data.get("inputs") or {}
        return cls(
            resolution=data["resolution"], duration=data.get("duration"), aspect_ratio=data.get("aspect_ratio"),
            inputs={k: tuple(v) for k, v in inputs.items()}, seed=data.get("seed"),
            timeout_s=data.get("timeout_s"),
        )
