"""The `[models.engine]` table of a model served by an engine outside the node.

operations.md fixes the backend names and the keys; this module checks them when
the catalog is read, so a node never starts half-configured. Each problem is one
line naming the model and the key (`model 'sdxl': engine.bind.prompt: ...`).

Extra keys (beyond operations.md's), all optional:

    timeout_s       per HTTP call to the engine (default 30)
    poll_s          comfyui: fallback poll of /queue and /history while the
                    websocket is quiet (default 2); cog: health check period;
                    replicate / fal: status poll period (default 1)
    url             replicate / fal: the API's base URL (for a proxy or a peer)
    max_tokens      openai: the longest text.llm reply asked of the server
    temperature     openai: text.llm sampling temperature (0: one reply per seed)
    outcome         cog: "webhook" (default) or "response": how a prediction's end
                    reaches the node (service/engines/cog.py, docs/engines.md)

Whether `token_env` is set is checked at node start (`missing_tokens`), not here:
the catalog is data, the environment belongs to the running node.

Which backends are engines is not decided here: the engines table
(service/engines/table.py) hands `parse_engine` its backend name -> table class
mapping. This layer loads no trio or httpx, so it cannot import the engine clients;
the node passes the mapping in (`load_catalog(..., engines=...)`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

BIND_FIELDS = ("prompt", "seed", "width", "height", "duration", "aspect_ratio")
_URL = r"^https?://[^\s/?#]+(/[^\s?#]*)?$"
_ENV = r"^[A-Za-z_][A-Za-z0-9_]*$"


# The node's engine client keeps at most this many connections (service/engines/transport.py).
ENGINE_CONNECTIONS = 256
# A Cog model with `outcome = "response"` holds one of them for each running prediction: at
# most half may be held that way, so health checks, creates and output reads still find one.
HELD_MAX = ENGINE_CONNECTIONS // 2


class EngineConfigError(ValueError):
    """One line: which key of which model's engine table is wrong."""


class EngineTable(BaseModel):
    """The `[models.engine]` table of one engine backend: a new engine subclasses it (or
    `Bound` / `Pooled`) with its own keys, and names it in its table row."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(default=30.0, gt=0, le=3600)

    def checked(self, where: str, base_dir: Path) -> EngineTable:
        """The table once the checks pydantic cannot make alone have passed (files it names,
        keys that go together); raise EngineConfigError naming the key."""
        return self


class Bound(EngineTable):
    bind: dict[str, str] = {}

    @field_validator("bind")
    @classmethod
    def _known_fields(cls, v: dict[str, str]) -> dict[str, str]:
        for key, target in v.items():
            if key not in BIND_FIELDS and not re.fullmatch(r"inputs\.[a-z_]+", key):
                raise ValueError(f"unknown request field {key!r} (known: {', '.join(BIND_FIELDS)}, inputs.<slot>)")
            if not target:
                raise ValueError(f"{key}: empty target")
        return v


class Pooled(Bound):
    urls: list[str] = Field(min_length=1)

    @field_validator("urls")
    @classmethod
    def _http_urls(cls, v: list[str]) -> list[str]:
        for u in v:
            if not re.fullmatch(_URL, u):
                raise ValueError(f"{u!r} is not an http(s) base URL")
        if len(set(v)) != len(v):
            raise ValueError("a URL is listed twice")
        return [u.rstrip("/") for u in v]


class ComfyEngine(Pooled):
    workflow: str = Field(min_length=1)
    poll_s: float = Field(default=2.0, gt=0, le=60)
    graph: dict[str, Any] = {}  # the loaded workflow, filled by `checked`

    def checked(self, where: str, base_dir: Path) -> ComfyEngine:
        graph = _load_graph(where, base_dir / self.workflow)
        for key, target in self.bind.items():
            _check_target(where, key, target, graph)
        return self.model_copy(update={"graph": graph})


class CogEngine(Pooled):
    poll_s: float = Field(default=1.0, gt=0, le=60)
    outcome: Literal["webhook", "response"] = "webhook"


class ReplicateEngine(Bound):
    model: str | None = Field(default=None, pattern=r"^[\w.-]+/[\w.-]+$")
    version: str | None = Field(default=None, min_length=1)
    token_env: str = Field(pattern=_ENV)
    url: str = Field(default="https://api.replicate.com/v1", pattern=_URL)
    poll_s: float = Field(default=1.0, gt=0, le=60)

    def checked(self, where: str, base_dir: Path) -> ReplicateEngine:
        if (self.model is None) == (self.version is None):
            raise EngineConfigError(f"{where}: engine.model: give either model (owner/name) or version, "
                                    "not both or neither")
        return self


class OpenAIEngine(EngineTable):
    url: str = Field(pattern=_URL)
    model: str = Field(min_length=1)
    token_env: str | None = Field(default=None, pattern=_ENV)
    timeout_s: float = Field(default=600.0, gt=0, le=3600)
    max_tokens: int | None = Field(default=None, gt=0)  # text.llm: the longest reply asked for
    temperature: float | None = Field(default=None, ge=0, le=2)  # text.llm: 0 = the same reply for a seed


class FalEngine(Bound):
    app: str = Field(pattern=r"^[\w.-]+/[\w.-]+(/[\w./-]+)?$")
    token_env: str = Field(pattern=_ENV)
    url: str = Field(default="https://queue.fal.run", pattern=_URL)
    poll_s: float = Field(default=1.0, gt=0, le=60)


EngineTables = Mapping[str, type[EngineTable]]  # backend name -> its table class
NO_ENGINES: EngineTables = MappingProxyType({})


def parse_engine(model_id: str, backend: str, slots: tuple[str, ...], raw: dict[str, Any] | None,
                 base_dir: Path, engines: EngineTables) -> EngineTable | None:
    """The checked engine table of one model, or None for a built-in model."""
    where = f"model {model_id!r}"
    table = engines.get(backend)
    if table is None:
        if raw is not None:
            raise EngineConfigError(f"{where}: engine: backend {backend!r} is built in and takes no [models.engine]")
        return None
    if raw is None:
        raise EngineConfigError(f"{where}: engine: backend {backend!r} needs a [models.engine] table")
    try:
        engine = table.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(table)"
        raise EngineConfigError(f"{where}: engine.{key}: {err['msg'].removeprefix('Value error, ')}") from None
    if isinstance(engine, Bound):
        for key in engine.bind:
            if key.startswith("inputs.") and key.removeprefix("inputs.") not in slots:
                raise EngineConfigError(f"{where}: engine.bind.{key}: the model has no input slot "
                                        f"{key.removeprefix('inputs.')!r} (slots: {', '.join(slots) or 'none'})")
    return engine.checked(where, base_dir)


class _Served(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def engine(self) -> EngineTable | None: ...

    @property
    def concurrency(self) -> int: ...


def held_connections(models: Iterable[_Served]) -> str | None:
    """The problem, if the Cog models in response mode could hold more than HELD_MAX engine
    connections at once (each server runs `concurrency` predictions; the node sends no more)."""
    held = [(m.id, m.concurrency * len(m.engine.urls)) for m in models
            if isinstance(m.engine, CogEngine) and m.engine.outcome == "response"]
    total = sum(n for _, n in held)
    if total <= HELD_MAX:
        return None
    each = ", ".join(f"{model_id!r} {n}" for model_id, n in held)
    return (f"engine.outcome: \"response\" holds an engine connection for each running prediction: {total} at "
            f"once (concurrency x urls: {each}), more than the node's {HELD_MAX}; give some of them the webhook")


def missing_tokens(models: Iterable[_Served]) -> list[str]:
    """One line per engine model whose `token_env` names an unset variable."""
    out = []
    for m in models:
        name = getattr(m.engine, "token_env", None)
        if name and not os.environ.get(name):
            out.append(f"model {m.id!r}: engine.token_env: the variable {name} is not set")
    return out


def _load_graph(where: str, path: Path) -> dict[str, Any]:
    try:
        graph = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EngineConfigError(f"{where}: engine.workflow: file not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EngineConfigError(f"{where}: engine.workflow: cannot read {path}: {e}") from None
    if not isinstance(graph, dict) or not graph or not all(
        isinstance(n, dict) and isinstance(n.get("class_type"), str) and isinstance(n.get("inputs"), dict)
        for n in graph.values()
    ):
        raise EngineConfigError(f"{where}: engine.workflow: {path} is not an API-format workflow "
                                "({node id: {class_type, inputs}}; export it with \"Save (API)\")")
    return graph


def _check_target(where: str, key: str, target: str, graph: dict[str, Any]) -> None:
    node_id, dot, name = target.partition(".")
    if not dot or not name:
        raise EngineConfigError(f"{where}: engine.bind.{key}: {target!r} is not \"<node id>.<input name>\"")
    if node_id not in graph:
        raise EngineConfigError(f"{where}: engine.bind.{key}: node {node_id!r} is not in the workflow")
    if name not in graph[node_id]["inputs"]:
        raise EngineConfigError(f"{where}: engine.bind.{key}: node {node_id!r} "
                                f"({graph[node_id]['class_type']}) has no input {name!r}")

