"""The shape of the operator's model catalog (TOML), checked with pydantic.

Strict on purpose: an operator's typo (an unknown key, a float price, a price
for a resolution the model does not list) must stop the service at start, not
surface later as a wrong charge. Prices are decimal strings with at most two
places; floats are refused.

    [[models]]
    id = "camera-move"                 # stable slug, unique
    capability = "video.generate"      # one of the eight capability ids
    backend = "camera_move_video"      # name of the backend that renders it
    description = "..."                # optional
    resolutions = ["480p", "720p"]     # first = default
    durations = [5]                    # seconds; first = default; [] = takes none
    concurrency = 1                    # jobs rendering at once
    slots = { start_frame = 1 }        # exact count per slot; default = capability max
    max_output_pixels = 16777216       # media.upscale only: refuse inputs whose output would be larger
    timeout_s = 600                    # a render with no outcome after this long fails, credits released
    max_input_seconds = 20             # longest video input (seconds), refused at submit
    max_input_frames = 1200            # most frames of a video input, refused at submit
    timeout_s_per_megapixel = 0.5      # a video input's render time: this x frames x output megapixels,
    min_timeout_s = 60                 #   at least this; past timeout_s: refused at submit
    [models.engine]                    # engine backends only (comfyui, cog, replicate, openai, fal):
    urls = ["http://gpu1:8188"]        #   see service/catalog/engines.py and docs/engines.md
    prices = [                         # one per tier; a missing tier cannot be run
      { resolution = "480p", duration = 5, credits = "10.00" },
    ]
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.money import to_uc

from .capabilities import BY_ID

SLUG = r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class PriceEntry(_Strict):
    resolution: str
    duration: int | None = None
    credits: str

    @field_validator("credits")
    @classmethod
    def _exact(cls, v: str) -> str:
        uc = to_uc(v)  # ValueError becomes a validation error
        if uc < 0:
            raise ValueError("credits cannot be negative")
        return v


class ModelEntry(_Strict):
    id: str = Field(pattern=SLUG)
    capability: str
    backend: str = Field(min_length=1)
    description: str | None = None
    resolutions: list[str] = Field(min_length=1)
    durations: list[int] = []
    concurrency: int = Field(ge=1)
    slots: dict[str, int] = {}
    prices: list[PriceEntry] = []
    max_output_pixels: int | None = Field(default=None, ge=1)  # media.upscale: largest output (width x height)
    timeout_s: int = Field(default=600, ge=1)  # a render with no outcome by then fails (hold released)
    max_input_seconds: float | None = Field(default=None, gt=0)  # longest video input
    max_input_frames: int | None = Field(default=None, ge=1)  # most frames of a video input
    timeout_s_per_megapixel: float | None = Field(default=None, gt=0)  # video renders: budget per output MP x frame
    min_timeout_s: int = Field(default=60, ge=1)  # floor of that budget (timeout_s is its ceiling)
    engine: dict[str, Any] | None = None  # [models.engine] of an engine backend; checked in engines.py

    @field_validator("capability")
    @classmethod
    def _known_capability(cls, v: str) -> str:
        if v not in BY_ID:
            raise ValueError(f"unknown capability {v!r}; known: {', '.join(BY_ID)}")
        return v

    @field_validator("resolutions")
    @classmethod
    def _unique_resolutions(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v) or any(not r for r in v):
            raise ValueError("resolutions must be distinct non-empty strings")
        return v

    @field_validator("durations")
    @classmethod
    def _positive_durations(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v) or any(d <= 0 for d in v):
            raise ValueError("durations must be distinct positive whole seconds")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> ModelEntry:
        cap = BY_ID[self.capability]
        for name, count in self.slots.items():
            spec = cap.slot(name)
            if spec is None:
                known = ", ".join(s.name for s in cap.inputs) or "none"
                raise ValueError(f"slot {name!r} is not a slot of {cap.id} (slots: {known})")
            if not spec.min <= count <= spec.max:
                raise ValueError(f"slot {name!r} count must be between {spec.min} and {spec.max}")
        seen: set[tuple[str, int | None]] = set()
        for p in self.prices:
            if p.resolution not in self.resolutions:
                raise ValueError(f"price for resolution {p.resolution!r} which the model does not list")
            if self.durations and p.duration not in self.durations:
                raise ValueError(f"price for duration {p.duration!r} which the model does not list")
            if not self.durations and p.duration is not None:
                raise ValueError("price has a duration but the model takes none")
            tier = (p.resolution, p.duration)
            if tier in seen:
                raise ValueError(f"two prices for tier {tier_label(*tier)}")
            seen.add(tier)
        return self


class CatalogFile(_Strict):
    models: list[ModelEntry] = []

    @model_validator(mode="after")
    def _unique_ids(self) -> CatalogFile:
        ids = [m.id for m in self.models]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate model ids: {', '.join(dupes)}")
        return self


def tier_label(resolution: str, duration: int | None) -> str:
    """`1k` for a model without durations, `720p/5s` otherwise."""
    return resolution if duration is None else f"{resolution}/{duration}s"
