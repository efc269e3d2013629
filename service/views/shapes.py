"""The response shapes the views build, declared once as TypedDicts.

mypy holds every view to its shape (a key added, dropped or misspelt is a type error), and
the same classes make the OpenAPI document's components (pydantic reads a TypedDict as it
reads a model: service/http/responses re-exports these beside the shapes built elsewhere).
A key that is not `NotRequired` is always sent, null where it has no value. Responses are
open: a reader must ignore a key it does not know (spec "Versioning").

The field types are strings with a documented format, and open enums: a string whose known
values are listed (`examples`) but not closed, so a client generated from the document still
parses a status or event name added later. The values come from their owner
(service/machines.py, the catalog), never restated here.
"""

from __future__ import annotations

from typing import Annotated, Iterable, Literal, Union, get_args

from pydantic import Field, WithJsonSchema
from typing_extensions import NotRequired, TypedDict  # pydantic reads typing's TypedDict only from 3.12

from service.catalog.capabilities import ASSET_KINDS, CAPABILITIES
from service.machines import JOB, RUN, STEP, Machine
from service.roles import ROLE_IDS, ROLE_NAMES

# -- field types ---------------------------------------------------------------------------------
Uuid = Annotated[str, WithJsonSchema({"type": "string", "format": "uuid"})]
Timestamp = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
Day = Annotated[str, WithJsonSchema({"type": "string", "format": "date"})]
Credits = Annotated[str, WithJsonSchema({"type": "string", "pattern": r"^-?[0-9]+\.[0-9]{2}$",
                                         "description": "Decimal string of credits."})]
Sha256 = Annotated[str, WithJsonSchema({"type": "string", "pattern": "^[0-9a-f]{64}$"})]


def known(values: Iterable[str], what: str = "value") -> WithJsonSchema:
    """The schema of a string with known values (`Annotated[str, known(...)]`): `examples`
    lists them; another value may appear."""
    vals = list(values)
    return WithJsonSchema({
        "type": "string", "examples": vals,
        "description": f"Known values ({what}): {', '.join(vals)}. Others may appear: treat an unknown one as opaque.",
    })


def sorted_states(machine: Machine) -> list[str]:
    """A machine's states in a stable order (the machine keeps a set)."""
    return sorted(machine.states)


SourceName = Literal["api", "studio", "workflow"]  # a job's or feed row's `source` (`workflow`: product runs)
SOURCES: tuple[str, ...] = get_args(SourceName)

JobState = Annotated[str, known(sorted_states(JOB), "job status")]
Source = Annotated[str, known(SOURCES, "source")]
CapabilityId = Annotated[str, known([c.id for c in CAPABILITIES], "capability")]
AssetKind = Annotated[str, known(ASSET_KINDS, "asset kind")]


# -- jobs and assets (service/views/jobs.py) -------------------------------------------------------
class AssetOutput(TypedDict):
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


class CreditsPair(TypedDict):
    estimate: Credits
    actual: Credits | None


class Progress(TypedDict):
    value: float
    max: float
    step: str | None


class JobStatus(TypedDict):
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
    progress: NotRequired[Progress]
    usage: NotRequired[dict[str, int]]


class SubmitAccepted(TypedDict):
    status: Literal["queued"]
    request_id: Uuid
    status_url: str
    cancel_url: str
    credits_estimate: Credits


# -- product runs and the merged feed (service/views/runs.py, run_feed.py) -------------------------
class RunStep(TypedDict):
    """`started_at` and `finished_at` (beyond the spec) show the steps that ran at once."""

    key: str
    capability: CapabilityId | None
    op: str | None
    model: str | None
    status: Annotated[str, known(sorted_states(STEP), "step status")]
    request_id: Uuid | None
    outputs: list[AssetOutput]
    error: str | None
    started_at: Timestamp | None
    finished_at: Timestamp | None


class ProductRun(TypedDict):
    id: Uuid
    status: Annotated[str, known(sorted_states(RUN), "run status")]
    product: str
    product_version: int
    project_id: Uuid
    inputs: dict[str, object]
    steps: list[RunStep]
    outputs: dict[str, list[AssetOutput]]
    credits: CreditsPair
    error: str | None
    status_url: str
    cancel_url: str
    created_at: Timestamp
    started_at: Timestamp | None
    finished_at: Timestamp | None


class FeedJob(JobStatus):
    """A standalone job in `GET /v1/runs`: the job status object with `type` and `id`."""

    type: Literal["job"]
    id: Uuid


class FeedRun(ProductRun):
    """A product run in `GET /v1/runs`: the ProductRun with `type` and `source`."""

    type: Literal["run"]
    source: Literal["workflow"]


FeedItem = Annotated[Union[FeedJob, FeedRun], Field(discriminator="type")]


class RunsPage(TypedDict):
    items: list[FeedItem]
    total: int
    next_cursor: str | None


# -- projects and API keys (service/views/accounts.py, spend.py) -----------------------------------
class ProjectFields(TypedDict):
    """A project row's own fields; `Project` adds the spend figures (service/views/spend.py)."""

    id: Uuid
    organization_id: Uuid
    name: str
    slug: str
    description: str | None
    is_default: bool
    is_archived: bool
    created_by: Uuid | None
    created_at: Timestamp
    updated_at: Timestamp | None
    archived_at: Timestamp | None


class ProjectSpend(TypedDict):
    monthly_spend_limit: Annotated[Credits | None, Field(
        description="Credits the project may spend per UTC calendar month; null: no limit.")]
    month_spent: Annotated[Credits, Field(description="Credits held or captured for the project's work "
                                          "since the start of the current UTC month.")]


class Project(ProjectFields, ProjectSpend):
    pass


class ApiKeyFields(TypedDict):
    """A key row's own fields; `ApiKey` adds the spend figures (service/views/spend.py)."""

    id: Uuid
    name: str
    key_prefix: Annotated[str, WithJsonSchema({"type": "string", "pattern": "^aak_[0-9a-f]{8}$"})]
    user_id: Uuid
    role_id: Uuid | None
    expires_at: Timestamp | None
    is_active: bool
    created_at: Timestamp
    last_used_at: Timestamp | None


class KeySpend(TypedDict):
    spend_limit: Annotated[Credits | None, Field(description="Credits work submitted with this key may "
                                                 "ever spend; null: no limit.")]
    spent: Annotated[Credits, Field(description="Credits held or captured for work submitted with "
                                    "this key, ever.")]


class ApiKey(ApiKeyFields, KeySpend):
    pass


class ApiKeyCreated(ApiKey):
    key: Annotated[str, WithJsonSchema({"type": "string", "pattern": "^aak_[0-9a-f]{48}$",
                                        "description": "The full key; shown only here."})]


# -- roles (service/roles.py) ----------------------------------------------------------------------
RoleName = Annotated[str, known(ROLE_NAMES, "role")]


class Role(TypedDict):
    id: Annotated[str, known(ROLE_IDS.values(), "role id")]
    name: RoleName
    permissions: list[str]
