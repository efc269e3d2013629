"""Response shapes of the generation routes (spec "Job status object", "Asset output",
capabilities, models, estimate, assets). Built by service/views/jobs.py and the
catalog views; checked against these classes in tests (service/http/responses/check.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from service.views.run_feed import SOURCES
from service.catalog.capabilities import ASPECT_RATIOS, ASSET_KINDS, CAPABILITIES
from service.machines import JOB

from .types import Credits, Sha256, Shape, Timestamp, Uuid, known, sorted_states

JobState = Annotated[str, known(sorted_states(JOB), "job status")]
Source = Annotated[str, known(SOURCES, "source")]
CapabilityId = Annotated[str, known([c.id for c in CAPABILITIES], "capability")]
AssetKind = Annotated[str, known(ASSET_KINDS, "asset kind")]


class AssetOutput(Shape):
    id: Uuid
    url: str
    content_type: str
    width: int | None
    height: int | None
    duration_s: float | None


class Asset(AssetOutput):
    kind: AssetKind
    project_id: Uuid
    job_id: Uuid | None
    source: str
    size_bytes: int
    sha256: Sha256
    created_at: Timestamp


class CreditsPair(Shape):
    estimate: Credits
    actual: Credits | None


class Progress(Shape):
    value: float
    max: float
    step: str | None


class JobStatus(Shape):
    """`progress` is sent only while an engine reports it (rendering jobs of engine models);
    `usage` only when the engine reported it (a text.llm job's token counts)."""

    status: JobState
    request_id: Uuid
    status_url: str
    cancel_url: str
    capability: CapabilityId
    model: str
    project_id: Uuid
    source: Source
    outputs: list[AssetOutput]
    images: list[AssetOutput]
    video: AssetOutput | None
    credits: CreditsPair
    error: str | None
    created_at: Timestamp
    finished_at: Timestamp | None
    progress: Progress = None  # type: ignore[assignment]
    usage: dict[str, int] = None  # type: ignore[assignment]


class SubmitAccepted(Shape):
    status: Literal["queued"]
    request_id: Uuid
    status_url: str
    cancel_url: str
    credits_estimate: Credits


class Estimate(Shape):
    capability: CapabilityId
    model: str
    resolution: str | None
    duration: int | float | None
    credits: Credits
    tier: str


class CapabilitySlot(Shape):
    name: str
    kinds: list[AssetKind]
    min: int
    max: int
    required: bool  # min > 0: every model of the capability needs this slot filled


class ModelSlot(Shape):
    name: str
    kinds: list[AssetKind]
    count: int
    required: bool  # count > 0: a submit to this model without it is refused (422)


class Price(Shape):
    resolution: str
    duration: int | None
    credits: Credits


class Offering(Shape):
    id: str
    description: str | None
    available: bool
    resolutions: list[str]
    durations: list[int]
    inputs: list[ModelSlot]
    prices: list[Price]


class Capability(Shape):
    id: CapabilityId
    description: str
    output: AssetKind | None
    prompt_required: bool
    prompt_meaning: str
    inputs: list[CapabilitySlot]
    aspect_ratios: list[Annotated[str, known(ASPECT_RATIOS, "aspect ratio")]]
    models: list[Offering]


class ModelCapability(Shape):
    id: CapabilityId
    prices: list[Price]


class ModelQueue(Shape):
    """How busy an engine model is (additive: only engine-backed models carry it)."""

    queued: int = Field(ge=0, description="Jobs waiting to start (for a slot or a live server).")
    running: int = Field(ge=0, description="Jobs running on the model's servers now.")
    servers_up: int | None = Field(ge=0, description="Servers answering their health check; null for a hosted API.")
    servers_down: int | None = Field(ge=0, description="Servers known down; null for a hosted API.")
    time_to_start_p50_s: float | None = Field(
        ge=0, description="Median seconds from submit to rendering of recent jobs; null before the first.")


class Model(Shape):
    """`queue` is sent only for engine-backed models (additive): jobs waiting and running,
    servers up and down, median time to start."""

    id: str
    description: str | None
    available: bool
    capabilities: list[ModelCapability]
    queue: ModelQueue = None  # type: ignore[assignment]


class AssetUrl(Shape):
    url: str
    expires_in: Literal[900]
