"""How busy each engine-backed model is, for a user waiting on it and for `/metrics`.

A job on an engine can wait twice: for one of the model's slots (job_slots.py, the job is
`queued`) and, once `rendering`, for a live server with room (engines/pool.py, when a
server is down). `queued` counts both waits, `running` only jobs on a server. Servers are
the pool's (hosted APIs have none: null). `time_to_start_p50_s` is the median of the
last START_WINDOW jobs' submit -> `rendering` times (null before the first start).
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any, Callable

from service.actors.jobs.slots import ModelSlots
from service.views.catalog_shapes import ModelQueue

START_WINDOW = 256


class EngineQueues:
    def __init__(self, catalog: Callable[[], Any], slots: ModelSlots, pools: Callable[[], dict[str, Any]]) -> None:
        """`catalog` is read on every call: a catalog reload (service/reload.py) adds and
        removes engine models without a restart."""
        self._catalog = catalog
        self._slots = slots
        self._pools = pools  # model id -> engines.pool.Pool (read only)
        self._starts: dict[str, deque[float]] = {}

    @property
    def _models(self) -> list[str]:
        return [m.id for m in self._catalog().models if m.engine is not None]

    def started(self, model_id: str, waited_s: float) -> None:
        """A job of the model went from `queued` to `rendering` after `waited_s`."""
        self._starts.setdefault(model_id, deque(maxlen=START_WINDOW)).append(max(0.0, waited_s))

    def view(self, model_id: str) -> ModelQueue | None:
        """`{queued, running, servers_up, servers_down, time_to_start_p50_s}` of an engine
        model; None for a built-in one."""
        if model_id not in self._models:
            return None
        holding, waiting = self._slots.stats(model_id)
        pool = self._pools().get(model_id)
        if pool is None:  # a hosted API: every slot holder is running there
            running, up, down = holding, None, None
        else:
            running = min(holding, sum(s.busy for s in pool.servers))
            down = sum(1 for s in pool.servers if s.down)
            up = len(pool.servers) - down
        starts = self._starts.get(model_id, ())
        return {"queued": waiting + holding - running, "running": running, "servers_up": up,
                "servers_down": down,
                "time_to_start_p50_s": round(statistics.median(starts), 3) if starts else None}

    def all(self) -> dict[str, ModelQueue]:
        return {m: v for m in self._models if (v := self.view(m)) is not None}
