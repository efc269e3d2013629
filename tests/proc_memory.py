"""Memory of a node together with its media-check workers (service/media/isolated.py):
the check decodes in those processes, so a bound on what a decode may hold is a bound on
their memory as much as on the node's own. From /proc; a worker that ends meanwhile is
skipped."""

from __future__ import annotations

import os
from pathlib import Path

import trio


def check_workers(pid: int) -> list[int]:
    """The media-check workers of process `pid` (its children started by multiprocessing)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == pid and b"spawn_main" in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except (OSError, IndexError, ValueError):
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
