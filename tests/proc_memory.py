"""A node's child processes, and its memory together with its media-check workers'
(service/media/isolated.py): the check decodes in those processes, so a bound on what a
decode may hold is a bound on their memory as much as on the node's own. From /proc; a
worker that ends meanwhile is skipped."""

from __future__ import annotations

from pathlib import Path

import trio


def children(pid: int) -> list[int]:
    """The child processes of `pid`, whichever of its threads started them."""
    return [int(c) for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]


def check_workers(pid: int) -> list[int]:
    """The media-check workers of process `pid` (its children started by multiprocessing)."""
    found = []
    for child in children(pid):
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:  # ended meanwhile
            continue
    return found


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def total_kib(pid: int, field: str) -> int:
    """`field` (VmRSS, VmHWM) of `pid` plus its check workers'."""
    total = status_kib(pid, field)
    for worker in check_workers(pid):
        try:
            total += status_kib(worker, field)
        except OSError:
            pass
    return total


def reset_peaks(pid: int) -> None:
    """Reset the peak (VmHWM) of `pid` and of its check workers to their RSS now."""
    for p in (pid, *check_workers(pid)):
        try:
            Path(f"/proc/{p}/clear_refs").write_text("5")
        except FileNotFoundError:
            pass


class RssSampler:
    """The largest VmRSS of `pid` and its check workers together, sampled every `every_s`
    while running (`run` in a nursery): sees a decode in a worker that ends after it (a
    large decode retires its worker, and its VmHWM goes with it)."""

    def __init__(self, pid: int, every_s: float = 0.005) -> None:
        self.pid, self.every_s, self.max_kib = pid, every_s, 0

    async def run(self) -> None:
        while True:
            self.max_kib = max(self.max_kib, total_kib(self.pid, "VmRSS"))
            await trio.sleep(self.every_s)
