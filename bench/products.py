"""One `text-to-clip` run per resolution against the same steps run one after another.

Starts `genservice serve` (test mode, temp data dir) and, for each resolution and round:

- run:    POST /v1/workflows/products/text-to-clip/runs, poll (every 10 ms) until final;
          wall time from the POST to the final status observed.
- serial: the same four steps one after another, each waited for before the next: the
          still job, then the clip job (POST /v1/generation/capabilities/..., poll 10 ms),
          then the thumbnail and the cover with the op function the run uses
          (`service.actors.runs.ops.run_op`: the op, hashing and fsync'd placement of its
          output), on the stored asset files, in this process.

`run_vs_serial` = median run wall / median serial wall (below 1.0 when the run's parallel
steps, the thumbnail beside the clip, overlap). Also reported: the run's own step times
(`step_sum_s`: Σ finished_at - started_at of its steps, i.e. the steps back to back, and
`run_vs_step_sum` = the run's server-side wall / that sum). LAST line: a JSON object.

    python bench/products.py [--rounds 5] [--resolutions 480p,720p]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from server import create_org, running_server  # noqa: E402

from service.actors.runs.ops import run_op  # noqa: E402
from service.assets.files import FileStore  # noqa: E402

POLL_S = 0.01
FINAL_JOB = ("completed", "failed", "nsfw", "canceled")
FINAL_RUN = ("completed", "failed", "canceled")


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def wait_job(c: httpx.Client, job_id: str) -> dict:
    while True:
        st = c.get(f"/v1/generation/requests/{job_id}/status").json()
        if st["status"] in FINAL_JOB:
            assert st["status"] == "completed", st
            return st
        time.sleep(POLL_S)


def one_run(c: httpx.Client, prompt: str, resolution: str, seed: int) -> dict:
    t0 = time.perf_counter()
    r = c.post("/v1/workflows/products/text-to-clip/runs",
               json={"inputs": {"prompt": prompt, "resolution": resolution, "seed": seed}})
    assert r.status_code == 202, r.text
    run_id = r.json()["data"]["id"]
    while True:
        run = c.get(f"/v1/workflows/runs/{run_id}").json()["data"]
        if run["status"] in FINAL_RUN:
            break
        time.sleep(POLL_S)
    wall = time.perf_counter() - t0
    assert run["status"] == "completed", run
    steps = {s["key"]: ts(s["finished_at"]) - ts(s["started_at"]) for s in run["steps"]}
    return {"wall_s": wall, "server_wall_s": ts(run["finished_at"]) - ts(run["created_at"]),
            "step_sum_s": sum(steps.values()), "steps_s": steps}


def asset_file(c: httpx.Client, data_dir: str, asset_id: str) -> tuple[Path, float | None]:
    """The stored file of an asset (DATA_DIR/assets/ab/cd/<sha256>) and its duration."""
    rec = c.get(f"/v1/generation/assets/{asset_id}").json()["data"]
    sha = rec["sha256"]
    return Path(data_dir) / "assets" / sha[:2] / sha[2:4] / sha, rec["duration_s"]


def one_serial(c: httpx.Client, data_dir: str, prompt: str, resolution: str, seed: int) -> dict:
    times = {}
    t0 = time.perf_counter()
    r = c.post("/v1/generation/capabilities/image.generate",
               json={"prompt": prompt, "model": "proc-image", "aspect_ratio": "16:9", "resolution": "1k",
                     "seed": seed})
    assert r.status_code == 202, r.text
    still = wait_job(c, r.json()["request_id"])
    times["still"] = time.perf_counter() - t0
    t = time.perf_counter()
    r = c.post("/v1/generation/capabilities/video.generate",
               json={"prompt": prompt, "model": "camera-move", "aspect_ratio": "16:9", "resolution": resolution,
                     "duration": 5, "seed": seed, "inputs": {"start_frame": [still["outputs"][0]["id"]]}})
    assert r.status_code == 202, r.text
    clip = wait_job(c, r.json()["request_id"])
    times["clip"] = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as tmp:
        # the run's own op function (op + hash + fsync'd placement), on a scratch file store
        files = FileStore(tmp)
        still_file = asset_file(c, data_dir, still["outputs"][0]["id"])  # lookups outside the timings
        clip_file = asset_file(c, data_dir, clip["outputs"][0]["id"])
        t = time.perf_counter()
        run_op(files, Path(tmp) / "w1", "resize_image", {"max_side": 512}, *still_file)
        times["thumb"] = time.perf_counter() - t
        t = time.perf_counter()
        run_op(files, Path(tmp) / "w2", "extract_frame", {"at": "middle"}, *clip_file)
        times["cover"] = time.perf_counter() - t
    return {"wall_s": time.perf_counter() - t0, "steps_s": times}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--resolutions", default="480p,720p")
    args = ap.parse_args()
    resolutions = args.resolutions.split(",")
    print(f"# cpus={os.cpu_count()} python={platform.python_version()} rounds={args.rounds}")
    summary: dict = {"resolutions": {}}
    with running_server() as (url, token, data_dir):
        org = create_org(url, token)
        # enough credits for every round (a 720p run costs 21.00, its serial twin as much)
        httpx.post(url + f"/operator/v1/organizations/{org['organization_id']}/grants",
                   json={"credits": "5000.00", "reason": "bench"}, headers={"Authorization": f"Bearer {token}"},
                   timeout=30).raise_for_status()
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {org['api_key']}"}, timeout=60) as c:
            one_run(c, "warm-up", resolutions[0], 1)  # imports, codecs, first-use costs
            for res in resolutions:
                runs, serials = [], []
                for rnd in range(args.rounds):
                    prompt, seed = f"a lighthouse at dusk, round {rnd}", 100 + rnd
                    # alternate the order so neither side always runs on a warmer machine
                    if rnd % 2 == 0:
                        runs.append(one_run(c, prompt, res, seed))
                        serials.append(one_serial(c, data_dir, prompt, res, seed))
                    else:
                        serials.append(one_serial(c, data_dir, prompt, res, seed))
                        runs.append(one_run(c, prompt, res, seed))
                    print(f"{res} round {rnd}: run {runs[-1]['wall_s']:.3f}s "
                          f"(steps {', '.join(f'{k} {v:.3f}' for k, v in runs[-1]['steps_s'].items())}) | "
                          f"serial {serials[-1]['wall_s']:.3f}s "
                          f"(steps {', '.join(f'{k} {v:.3f}' for k, v in serials[-1]['steps_s'].items())})")
                run_wall = statistics.median(r["wall_s"] for r in runs)
                serial_wall = statistics.median(s["wall_s"] for s in serials)
                server_wall = statistics.median(r["server_wall_s"] for r in runs)
                step_sum = statistics.median(r["step_sum_s"] for r in runs)
                summary["resolutions"][res] = {
                    "run_wall_s": round(run_wall, 3), "serial_wall_s": round(serial_wall, 3),
                    "run_vs_serial": round(run_wall / serial_wall, 3),
                    "run_server_wall_s": round(server_wall, 3), "step_sum_s": round(step_sum, 3),
                    "run_vs_step_sum": round(server_wall / step_sum, 3),
                }
    per = summary["resolutions"]
    summary["run_vs_serial"] = round(statistics.median(v["run_vs_serial"] for v in per.values()), 3)
    summary["run_vs_step_sum"] = round(statistics.median(v["run_vs_step_sum"] for v in per.values()), 3)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
