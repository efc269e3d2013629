"""Engines: models served by engine servers outside the node (ComfyUI, Cog, ...).

Each engine is a client class (`protocol.Engine`) with a row in `table.ENGINES`; this
module knows none of them by name. It keeps a pool of servers per model whose engine
lists servers (health-checked), and runs a job through its engine with `drive.drive`.

`node.engines` is an `Engines`. The job actor renders an engine model with
`await engines.render(req, model)`, which returns the same outcome as a built-in
render (Completed / Failed) and never raises but trio.Cancelled; cancelling it
cancels the job on the engine too. Engine clients are trio tasks (httpx for HTTP,
trio-websocket for sockets), not worker threads: remote work is I/O.

Failures map to the spec's messages (operations.md, "Engines"): an HTTP error from
the engine -> upstream (HTTP status); cannot be reached -> unavailable; an execution
error or a lost job -> incomplete; finished with no file -> no output.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx
import trio

from service.backends.base import (
    MSG_INCOMPLETE,
    MSG_INTERNAL,
    MSG_NO_OUTPUT,
    MSG_UNAVAILABLE,
    MSG_UPSTREAM,
    Completed,
    Failed,
    RenderRequest,
)
from service.catalog.catalog import Catalog, Model

from .common import EngineError, Incomplete, NoOutput, Unreachable, Upstream
from .context import HOOK_PATH, Context, Progress
from .drive import drive
from .pool import Pool
from .protocol import Engine
from .table import ENGINES, Row
from .transport import engine_client

log = logging.getLogger(__name__)

__all__ = ["Engines", "HOOK_PATH"]


class Engines:
    def __init__(self, catalog: Catalog, base_url: Callable[[], str], hook_secret: bytes,
                 progress: Progress, table: Mapping[str, Row[Any]] | None = None,
                 hook_base: Callable[[], str | None] = lambda: None, allow_private: bool = False) -> None:
        # Engine URLs are the operator's own servers (often on a private network): no
        # SSRF guard here, unlike webhook calls to addresses a client chose.
        # a few small connection pools rather than one large one (transport.py says why)
        self.http = engine_client()
        # allow_private: the node's `webhook_allow_private`, for a hosted API's output URLs too
        self.context = Context(self.http, base_url, hook_secret, progress, hook_base, allow_private)
        # one client per engine backend (`table.ENGINES` when not given)
        self.clients: dict[str, Engine[Any]] = {
            name: row.engine(self.context) for name, row in (ENGINES if table is None else table).items()
        }
        # servers the operator runs have a pool (health-checked); hosted APIs do not
        self.pools: dict[str, Pool] = {
            m.id: Pool(m.id, urls, m.concurrency) for m in catalog.models if (urls := self._servers(m))
        }
        self._catalog = catalog
        self._nursery: trio.Nursery | None = None
        self._watchers: dict[str, trio.CancelScope] = {}

    def available(self, model: Model) -> bool:
        """False once every server of the model's pool is known down (submits answer 503)."""
        pool = self.pools.get(model.id)
        return pool is None or not pool.all_down

    def _servers(self, model: Model) -> list[str]:
        """The servers of the model's pool; [] for a built-in model or a hosted API."""
        client = self.clients.get(model.backend)
        return client.servers(model.engine) if client is not None and model.engine is not None else []

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Health checks of every pool, for as long as the node runs; the HTTP client is
        closed when the node's tasks end (after the render tasks were cancelled)."""
        try:
            async with trio.open_nursery() as n:
                self._nursery = n
                for pool in self.pools.values():
                    await n.start(self._watch, pool)
                task_status.started()
                await trio.sleep_forever()  # hosted APIs have no pool, but use the client too
        finally:
            with trio.CancelScope(shield=True):
                await self.http.aclose()

    async def _watch(self, pool: Pool, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            self._watchers[pool.model_id] = scope
            await pool.watch(self._health_check(pool.model_id), task_status=task_status)

    def _health_check(self, model_id: str) -> Callable[[str], Awaitable[bool]]:
        """A check of one server by the model's engine as the catalog now declares it."""
        async def healthy(url: str) -> bool:
            model = self._catalog.model(model_id)
            client = self.clients.get(model.backend) if model is not None else None
            if model is None or client is None or model.engine is None:
                return False
            return await client.health(model.engine, url)
        return healthy

    async def reload(self, catalog: Catalog) -> None:
        """A catalog reload: pools of new engine models are made and watched, pools whose
        servers changed are resized, pools of models gone take no new job (their running
        jobs finish on their servers)."""
        self._catalog = catalog
        wanted = {m.id: (m, urls) for m in catalog.models if (urls := self._servers(m))}
        for model_id, pool in self.pools.items():
            if model_id not in wanted:
                pool.resize([], pool.concurrency)
                scope = self._watchers.pop(model_id, None)
                if scope is not None:
                    scope.cancel()
        unwatched = []
        for model_id, (m, urls) in wanted.items():  # every pool in place before the first await
            if model_id in self.pools:
                self.pools[model_id].resize(urls, m.concurrency)
            else:
                self.pools[model_id] = Pool(model_id, urls, m.concurrency)
            if model_id not in self._watchers:
                unwatched.append(self.pools[model_id])
        for pool in unwatched:
            if self._nursery is not None:
                await self._nursery.start(self._watch, pool)

    async def aclose(self) -> None:
        """The node is stopping: jobs running on engines are left to finish there."""
        self.context.stopping = True

    async def render(self, req: RenderRequest, model: Model) -> Completed | Failed:
        """The job's outcome; never raises but trio.Cancelled (cancelling it cancels the job
        on the engine too)."""
        client = self.clients.get(model.backend)
        try:
            if client is None or model.engine is None:
                raise Unreachable(f"{model.backend} engines are not driven by this version")
            if not client.servers(model.engine):  # a hosted API: no pool, no health checks
                return await drive(client, model.engine, self.context, req)
            pool = self.pools.get(model.id)
            if pool is None:
                raise Unreachable(f"model {model.id} has no pool of {model.backend} servers")
            async with pool.acquire() as server:
                try:
                    return await drive(client, model.engine, self.context, req, server.url, model.concurrency)
                except (httpx.TransportError, Unreachable):
                    pool.mark(server, down=True)
                    raise
        except Upstream as e:
            return _failed(req, e, MSG_UPSTREAM.format(status=e.status))
        except (Unreachable, httpx.TransportError) as e:
            return _failed(req, e, MSG_UNAVAILABLE)
        except NoOutput as e:
            return _failed(req, e, MSG_NO_OUTPUT)
        except (Incomplete, EngineError) as e:
            return _failed(req, e, MSG_INCOMPLETE)
        except (ValueError, KeyError, TypeError) as e:  # an answer not shaped as the protocol says
            log.exception("job %s: %s answered something unexpected", req.job_id, model.backend)
            return _failed(req, e, MSG_INCOMPLETE)
        except Exception as e:  # noqa: BLE001 - reported as failure 5
            log.exception("job %s: engine %s crashed", req.job_id, model.backend)
            return _failed(req, e, MSG_INTERNAL)


def _failed(req: RenderRequest, error: Exception, message: str) -> Failed:
    log.warning("job %s: engine failure (%s): %s", req.job_id, type(error).__name__, error)
    return Failed(message)
