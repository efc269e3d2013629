"""Engines: models served by engine servers outside the node (ComfyUI, Cog, ...).

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
from collections.abc import Callable

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
from service.catalog.engines import CogEngine, ComfyEngine, FalEngine, OpenAIEngine, ReplicateEngine

from . import cog, comfyui, fal, openai, replicate
from .common import EngineError, Incomplete, NoOutput, Unreachable, Upstream
from .context import HOOK_PATH, Context, Progress
from .pool import Pool

log = logging.getLogger(__name__)

__all__ = ["Engines", "HOOK_PATH"]


class Engines:
    def __init__(self, catalog: Catalog, base_url: Callable[[], str], hook_secret: bytes,
                 progress: Progress) -> None:
        # Engine URLs are the operator's own servers (often on a private network): no
        # SSRF guard here, unlike webhook calls to addresses a client chose.
        self.http = httpx.AsyncClient(follow_redirects=False, timeout=30.0,
                                      limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))
        self.context = Context(self.http, base_url, hook_secret, progress)
        # servers the operator runs have a pool (health-checked); hosted APIs do not
        self.pools: dict[str, Pool] = {
            m.id: Pool(m.id, _urls(m.engine), m.concurrency) for m in catalog.models if _pooled(m)
        }
        self._catalog = catalog
        self._replicate_keys = replicate.SigningKeys()
        self._nursery: trio.Nursery | None = None
        self._watchers: dict[str, trio.CancelScope] = {}

    def serves(self, model: Model) -> bool:
        return model.engine is not None

    def available(self, model: Model) -> bool:
        """False once every server of the model's pool is known down (submits answer 503)."""
        pool = self.pools.get(model.id)
        return pool is None or not pool.all_down

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Health checks of every pool, for as long as the node runs; the HTTP client is
        closed when the node's tasks end (after the render tasks were cancelled)."""
        try:
            async with trio.open_nursery() as n:
                self._nursery = n
                for model_id, pool in self.pools.items():
                    await n.start(self._watch, pool)
                task_status.started()
                await trio.sleep_forever()  # hosted APIs have no pool, but use the client too
        finally:
            with trio.CancelScope(shield=True):
                await self.http.aclose()

    async def _watch(self, pool: Pool, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            self._watchers[pool.model_id] = scope
            await pool.watch(self._health_check(pool.model_id), task_status=task_status)

    def _health_check(self, model_id: str):
        """A check of one server by the model's engine as the catalog now declares it."""
        async def healthy(url: str) -> bool:
            model = self._catalog.model(model_id)
            engine = model.engine if model is not None else None
            if isinstance(engine, ComfyEngine):
                return await comfyui.healthy(self.http, url)
            if isinstance(engine, CogEngine):
                return await cog.healthy(self.http, url)
            if isinstance(engine, OpenAIEngine):
                return await openai.healthy(self.http, url, engine)
            return False
        return healthy

    async def reload(self, catalog: Catalog) -> None:
        """A catalog reload: pools of new engine models are made and watched, pools whose
        servers changed are resized, pools of models gone take no new job (their running
        jobs finish on their servers)."""
        self._catalog = catalog
        wanted = {m.id: m for m in catalog.models if _pooled(m)}
        for model_id, pool in self.pools.items():
            if model_id not in wanted:
                pool.resize([], pool.concurrency)
                scope = self._watchers.pop(model_id, None)
                if scope is not None:
                    scope.cancel()
        unwatched = []
        for model_id, m in wanted.items():  # every pool in place before the first await
            if model_id in self.pools:
                self.pools[model_id].resize(_urls(m.engine), m.concurrency)
            else:
                self.pools[model_id] = Pool(model_id, _urls(m.engine), m.concurrency)
            if model_id not in self._watchers:
                unwatched.append(self.pools[model_id])
        for pool in unwatched:
            if self._nursery is not None:
                await self._nursery.start(self._watch, pool)

    async def aclose(self) -> None:
        """The node is stopping: jobs running on engines are left to finish there."""
        self.context.stopping = True

    async def render(self, req: RenderRequest, model: Model) -> Completed | Failed:
        engine = model.engine
        try:
            if isinstance(engine, (ReplicateEngine, FalEngine)):  # hosted: no pool, no health checks
                if isinstance(engine, ReplicateEngine):
                    return Completed(await replicate.render(self.context, self._replicate_keys, req, engine))
                return Completed(await fal.render(self.context, req, engine))
            pool = self.pools.get(model.id)
            if pool is None:
                raise Unreachable(f"{model.backend} engines are not driven by this version")
            usage: dict = {}
            async with pool.acquire() as server:
                try:
                    if isinstance(engine, ComfyEngine):
                        outputs = await comfyui.render(self.context, req, engine, server.url)
                    elif isinstance(engine, CogEngine):
                        outputs = await cog.render(self.context, req, engine, server.url,
                                                   single_slot=model.concurrency == 1)
                    else:
                        assert isinstance(engine, OpenAIEngine)
                        outputs, usage = await openai.render(self.http, req, engine, server.url)
                except (httpx.TransportError, Unreachable):
                    pool.mark(server, down=True)
                    raise
            return Completed(outputs, usage.get("usage", {}))
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


def _pooled(m: Model) -> bool:
    return isinstance(m.engine, (ComfyEngine, CogEngine, OpenAIEngine))


def _urls(engine) -> list[str]:
    return [engine.url.rstrip("/")] if isinstance(engine, OpenAIEngine) else list(engine.urls)


def _failed(req: RenderRequest, error: Exception, message: str) -> Failed:
    log.warning("job %s: engine failure (%s): %s", req.job_id, type(error).__name__, error)
    return Failed(message)
