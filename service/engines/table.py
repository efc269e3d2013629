"""The engines this node drives, by backend name: one row per engine.

A row names the backend (`backend = "..."` in the catalog), the class of its
`[models.engine]` table (checked when the catalog is read) and the engine client class.
Everything else reads this table: the catalog's list of engine backends (`tables()`,
handed to `load_catalog`), the node's start-up check of backend names, and `Engines`,
which makes one client per row. Adding an engine is one module and one row here
(docs/engines.md, "Adding an engine"); `register` adds a row at run time (a plugin, a test).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from service.backends.run import BACKENDS
from service.catalog.engines import (
    CogEngine,
    ComfyEngine,
    EngineTable,
    EngineTables,
    FalEngine,
    OpenAIEngine,
    ReplicateEngine,
)

from .cog import Cog
from .comfyui import ComfyUI
from .fal import Fal
from .openai import OpenAI
from .protocol import MakeEngine
from .replicate import Replicate

T = TypeVar("T", bound=EngineTable)


@dataclass(frozen=True)
class Row(Generic[T]):
    backend: str
    table: type[T]
    engine: MakeEngine[T]


ENGINES: dict[str, Row[Any]] = {
    row.backend: row
    for row in (
        Row("comfyui", ComfyEngine, ComfyUI),
        Row("cog", CogEngine, Cog),
        Row("replicate", ReplicateEngine, Replicate),
        Row("openai", OpenAIEngine, OpenAI),
        Row("fal", FalEngine, Fal),
    )
}


def register(row: Row[Any]) -> None:
    """Add an engine (before the node loads its catalog). A name taken by another engine or
    by a built-in backend is refused: two meanings for one name would be a silent override."""
    if row.backend in BACKENDS or (row.backend in ENGINES and ENGINES[row.backend] != row):
        raise ValueError(f"backend {row.backend!r} is already taken")
    ENGINES[row.backend] = row


def tables() -> EngineTables:
    """Backend name -> `[models.engine]` table class: what the catalog checks engine models by."""
    return MappingProxyType({name: row.table for name, row in ENGINES.items()})


def backends() -> tuple[str, ...]:
    return tuple(ENGINES)
