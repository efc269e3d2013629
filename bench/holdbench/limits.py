"""WL: spend limits on the holds (service/credits/limits.py).

Exactness: in each round 64 submitters place a hold of the same price at once against a
fresh project limited to 20 holds' worth and a fresh key (in even rounds the project's limit
binds and the key's is 30 holds' worth; in odd rounds the other way round). Exactly 20 must
be accepted every round; `overspend` sums what any figure took past its limit, from the
answers and from the committed `spend_figures` rows. The accepted holds are then settled
(half captured in part, half released) and the figures must equal what was captured.

Throughput: W1 (one organization, closed loop hold + settle) with every hold naming a
project and a key whose limits never bind, against plain W1 in the same run, alternating.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

import trio

from holdbench.engines import ActorEngine
from holdbench.workloads import HOT, UC, Result, amount, fresh_dir, run_actor, w1
from service.actors.balance.messages import Capture, LimitPut, PlaceHold, Release
from service.errors import SpendLimitReached
from service.money import MAX_UC
from service.storage.db import dict_factory

WORTH, OTHER = 20, 30


def w1_limited(base: Path, n: int, duration: float, seed: int) -> Result:
    """W1 with a project and a key on every hold, each with a limit that never binds."""
    d = fresh_dir(base)
    try:
        async def setup(eng):
            await eng.grant(HOT, "seed", 10 ** 14)
            for scope, sid in (("project", "p-bench"), ("api_key", "k-bench")):
                await eng.registry.ask(HOT, LimitPut(scope, sid, MAX_UC))
            eng.scope = ("p-bench", "k-bench")
        res = run_actor(d, "WL", n, duration, seed, setup=setup, pick=lambda rng: HOT)
        res.engine = "limit"
        return res
    finally:
        shutil.rmtree(d, ignore_errors=True)


def exact_rounds(base: Path, rounds: int, n: int, seed: int) -> dict:
    """`rounds` rounds of `n` concurrent holds against a 20-holds limit (module docstring)."""
    d = fresh_dir(base)
    out = {"rounds": rounds, "submitters": n, "wrong_count": 0, "overspend_uc": 0, "figure_mismatch": 0,
           "accepted": 0, "refused": 0}
    rng = random.Random(seed)

    async def main():
        eng = ActorEngine(d / "limits.db", seed=seed)
        try:
            async with trio.open_nursery() as nursery:
                await eng.start(nursery)
                await eng.grant(HOT, "seed", 10 ** 14)
                for r in range(rounds):
                    await one_round(eng, r, amount(rng), rng)
                nursery.cancel_scope.cancel()
        finally:
            eng.close()

    async def one_round(eng, r: int, price: int, rng: random.Random) -> None:
        project, key = f"p{r}", f"k{r}"
        p_limit, k_limit = (WORTH, OTHER) if r % 2 == 0 else (OTHER, WORTH)
        await eng.registry.ask(HOT, LimitPut("project", project, p_limit * price))
        await eng.registry.ask(HOT, LimitPut("api_key", key, k_limit * price))
        accepted: list[str] = []

        async def submit(i: int) -> None:
            hid = f"l{r}-{i}"
            try:
                await eng.registry.ask(HOT, PlaceHold(hid, price, project_id=project, api_key_id=key))
                accepted.append(hid)
            except SpendLimitReached:
                out["refused"] += 1

        async with trio.open_nursery() as n_:
            for i in range(n):
                n_.start_soon(submit, i)
        out["accepted"] += len(accepted)
        if len(accepted) != WORTH:
            out["wrong_count"] += 1
        out["overspend_uc"] += max(0, len(accepted) * price - WORTH * price)
        figures = committed(eng, project, key)
        out["overspend_uc"] += max(0, figures[0] - p_limit * price) + max(0, figures[1] - k_limit * price)
        captured = 0
        for j, hid in enumerate(accepted):
            if j % 2:
                await eng.registry.ask(HOT, Release(hid))
            else:
                part = rng.randint(0, price // 10_000) * 10_000
                await eng.registry.ask(HOT, Capture(hid, part))
                captured += part
        if committed(eng, project, key) != (captured, captured):
            out["figure_mismatch"] += 1

    trio.run(main)
    shutil.rmtree(d, ignore_errors=True)
    out["overspend"] = out["overspend_uc"] / UC
    return out


def committed(eng, project: str, key: str) -> tuple[int, int]:
    """The project's (this month) and the key's committed figures, read from the database."""
    conn = sqlite3.connect(f"file:{eng.path}?mode=ro", uri=True)
    conn.row_factory = dict_factory
    try:
        rows = {r["scope"]: r["spent_uc"] for r in conn.execute(
            "SELECT scope, spent_uc FROM spend_figures WHERE (scope = 'project' AND scope_id = ?) OR "
            "(scope = 'api_key' AND scope_id = ?)", (project, key))}
    finally:
        conn.close()
    return rows.get("project", 0), rows.get("api_key", 0)


def plain(base: Path, n: int, duration: float, seed: int) -> Result:
    return w1(base, "actor", n, duration, seed)
