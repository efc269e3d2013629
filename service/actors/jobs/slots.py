"""Per-model render slots: at most `concurrency` jobs of a model render at once; the rest
wait in a fair FIFO (first asked, first granted).

Plain memory, no task: job actors call it from their handlers (one trio thread, so no
races). A waiting job is told `grant(job_id)` when its turn comes; `acquire` is idempotent,
so an actor reloaded after a crash can ask again without losing its place. A slot is held
until the job's render task has ended (a canceled render keeps its slot until its worker
stops), then `release` hands it to the next waiter.
"""

from __future__ import annotations

from collections import deque
from typing import Callable


class ModelSlots:
    def __init__(self, capacity: Callable[[str], int], grant: Callable[[str], None]) -> None:
        self._capacity = capacity
        self._grant = grant
        self._holders: dict[str, set[str]] = {}
        self._waiting: dict[str, deque[str]] = {}

    def acquire(self, model: str, job_id: str) -> bool:
        """True when the job holds a slot of `model` now; else it waits (once) in line."""
        holders = self._holders.setdefault(model, set())
        waiting = self._waiting.setdefault(model, deque())
        if job_id in holders:
            return True
        if job_id in waiting:
            return False
        if not waiting and len(holders) < max(1, self._capacity(model)):
            holders.add(job_id)
            return True
        waiting.append(job_id)
        return False

    def holds(self, model: str, job_id: str) -> bool:
        return job_id in self._holders.get(model, ())

    def release(self, model: str, job_id: str) -> None:
        """Give the slot back (or leave the line); the next waiter is granted."""
        holders = self._holders.get(model, set())
        if job_id in holders:
            holders.discard(job_id)
            self._grant_next(model)
            return
        waiting = self._waiting.get(model)
        if waiting and job_id in waiting:
            waiting.remove(job_id)

    def _grant_next(self, model: str) -> None:
        holders = self._holders.setdefault(model, set())
        waiting = self._waiting.setdefault(model, deque())
        while waiting and len(holders) < max(1, self._capacity(model)):
            job_id = waiting.popleft()
            holders.add(job_id)
            self._grant(job_id)

    def stats(self, model: str) -> tuple[int, int]:
        """(rendering, waiting) for a model."""
        return len(self._holders.get(model, ())), len(self._waiting.get(model, ()))
