"""Measurement hooks inside a `genservice serve` started by bench/profile_job.py.

Python imports `sitecustomize` at start-up from the path; profile_job.py puts this folder
first on the node's PYTHONPATH and sets GENSERVICE_BENCH_PROFILE (`cpu` or `profile`), so
the node runs unchanged (`python -m service serve`) with these hooks, and no other process
is touched (without the variable this file does nothing).

Both modes: every `Store` is remembered, so the commits (`Store.batches`) of a window can
be read, and the writes they carried (`Store.writes`: each `Store.write` a job's path asks
for; group commit puts many into one COMMIT). SIGUSR1 opens the window, SIGUSR2 closes it and writes `window.json` (commits,
CPU of the main thread and of the other threads from /proc) in GENSERVICE_BENCH_PROFILE_DIR.

Both modes run a trio Instrument that adds up the CPU of every task step by task name and
counts steps over the window (two `thread_time` calls a step), so the trio thread's CPU
splits into task steps and the run loop itself. With GENSERVICE_BENCH_SITES=1 it also counts
where each step ended: the task's innermost awaits (profile_job.py --sites). A `gc` callback
adds up the cyclic collector's CPU and runs over the window. The trio thread's wall clock
splits into its CPU, its run loop's waits with nothing to run (the instrument's I/O-wait
hooks), and its wait for a core (the kernel's schedstat); the rest is its wait for the GIL. `profile` also
runs, over the window only, cProfile on the trio thread with a CPU-time clock (`time.thread_time`: waiting in epoll
costs nothing, as it costs no CPU), written to `main.pstats`.
"""

from __future__ import annotations

import os

if os.environ.get("GENSERVICE_BENCH_PROFILE") in ("cpu", "profile"):
    import cProfile
    import json
    import signal
    import threading
    import time
    from pathlib import Path

    MODE = os.environ["GENSERVICE_BENCH_PROFILE"]
    OUT = Path(os.environ["GENSERVICE_BENCH_PROFILE_DIR"])
    TICKS = os.sysconf("SC_CLK_TCK")
    STORES: list = []
    MAIN_TID = threading.get_native_id()

    def thread_cpu() -> dict[int, float]:
        out = {}
        for task in Path("/proc/self/task").iterdir():
            try:
                f = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(task.name)] = (int(f[11]) + int(f[12])) / TICKS
        return out

    class StepClock:
        """trio Instrument: CPU per task name over task steps, and the number of steps."""

        def __init__(self) -> None:
            self.on = False
            self.cpu: dict[str, float] = {}
            self.steps: dict[str, int] = {}
            self._t = 0.0
            self.sites: dict[str, int] = {}

        def before_task_step(self, task) -> None:
            self._t = time.thread_time()

        # the run loop's waits for I/O with nothing to run (a timeout above 0), by the wall
        # clock: the trio thread idle because every task waits on something else
        idle = 0.0
        _w = 0.0

        def before_io_wait(self, timeout: float) -> None:
            self._w = time.perf_counter() if timeout > 0 else 0.0

        def after_io_wait(self, timeout: float) -> None:
            if self.on and self._w:
                self.idle += time.perf_counter() - self._w

        def after_task_step(self, task) -> None:
            if self.on:
                dt = time.thread_time() - self._t
                self.cpu[task.name] = self.cpu.get(task.name, 0.0) + dt
                self.steps[task.name] = self.steps.get(task.name, 0) + 1
                if SITES:
                    key = task.name + " @ " + where(task)
                    self.sites[key] = self.sites.get(key, 0) + 1

    SITES = os.environ.get("GENSERVICE_BENCH_SITES") == "1"

    def where(task) -> str:
        """Where a task is suspended: the innermost four frames of its chain of awaits."""
        chain, c = [], task.coro
        while c is not None:
            f = getattr(c, "cr_frame", None) or getattr(c, "ag_frame", None) or getattr(c, "gi_frame", None)
            if f is not None:
                chain.append(f"{f.f_code.co_filename.rsplit('/', 2)[-1]}:{f.f_lineno}({f.f_code.co_name})")
            c = getattr(c, "cr_await", None) or getattr(c, "ag_await", None) or getattr(c, "gi_yieldfrom", None)
        return " < ".join(reversed(chain[-4:]))

    CLOCK = StepClock()
    PROFILE = cProfile.Profile(time.thread_time) if MODE == "profile" else None
    STATE: dict = {}

    def _patch() -> None:
        import trio

        from service.storage import db

        init = db.Store.__init__

        def remembered_init(self, *a, **kw):
            init(self, *a, **kw)
            STORES.append(self)

        db.Store.__init__ = remembered_init
        run = trio.run

        def run_with_instrument(*a, **kw):
            kw["instruments"] = [*kw.get("instruments", ()), CLOCK]
            return run(*a, **kw)

        trio.run = run_with_instrument

    def run_delay() -> float:
        """Seconds the trio thread was runnable but waited for a core (the kernel's
        schedstat: its run-queue wait), 0.0 where the kernel does not say."""
        try:
            return int(Path(f"/proc/self/task/{MAIN_TID}/schedstat").read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0

    def preemptions() -> int:
        """Times the trio thread lost its core while it could still run (the kernel's
        nonvoluntary context switches): another thread or process woke and took it."""
        try:
            for line in Path(f"/proc/self/task/{MAIN_TID}/status").read_text().splitlines():
                if line.startswith("nonvoluntary_ctxt_switches:"):
                    return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0

    def _open(signum, frame) -> None:
        STATE.update(cpu=thread_cpu(), batches=sum(s.batches for s in STORES), writes=sum(s.writes for s in STORES),
                     t=time.monotonic(),
                     main_cpu=time.thread_time(), run_delay=run_delay(), preempted=preemptions())
        CLOCK.cpu.clear()
        CLOCK.steps.clear()
        CLOCK.sites.clear()
        CLOCK.idle = 0.0
        GC.update(s=0.0, runs=[0, 0, 0])
        CLOCK.on = True
        if PROFILE is not None:
            PROFILE.enable()

    def _close(signum, frame) -> None:
        if PROFILE is not None:
            PROFILE.disable()
        CLOCK.on = False
        cpu = thread_cpu()
        main = cpu.get(MAIN_TID, 0.0) - STATE["cpu"].get(MAIN_TID, 0.0)
        others = sum(v - STATE["cpu"].get(tid, 0.0) for tid, v in cpu.items() if tid != MAIN_TID)
        report = {"mode": MODE, "wall_s": time.monotonic() - STATE["t"], "commits": sum(s.batches for s in STORES)
                  - STATE["batches"], "writes": sum(s.writes for s in STORES) - STATE["writes"],
                  "stores": len(STORES), "main_thread_cpu_s": main, "other_threads_cpu_s": others,
                  "threads": len(cpu), "main_thread_cpu_s_fine": time.thread_time() - STATE["main_cpu"],
                  "task_cpu_s": CLOCK.cpu, "task_steps": CLOCK.steps, "sites": CLOCK.sites, "gc_s": GC["s"], "gc_runs": GC["runs"],
                  "idle_wait_s": CLOCK.idle, "run_delay_s": run_delay() - STATE["run_delay"],
                  "preempted": preemptions() - STATE["preempted"]}
        if PROFILE is not None:
            PROFILE.dump_stats(str(OUT / "main.pstats"))
        (OUT / "window.json.tmp").write_text(json.dumps(report))
        (OUT / "window.json.tmp").rename(OUT / "window.json")

    import gc

    GC = {"s": 0.0, "runs": [0, 0, 0], "t0": 0.0}

    def _collector(phase: str, info: dict) -> None:
        """The cyclic collector's CPU over the window, and its runs by generation."""
        if phase == "start":
            GC["t0"] = time.thread_time()
        elif CLOCK.on:
            GC["s"] += time.thread_time() - GC["t0"]
            GC["runs"][info["generation"]] += 1

    gc.callbacks.append(_collector)
    signal.signal(signal.SIGUSR1, _open)
    signal.signal(signal.SIGUSR2, _close)
    try:
        _patch()
    except ImportError:  # not the service (some other interpreter on this path): leave it
        pass
