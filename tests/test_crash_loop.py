"""The random kill -9 crash loop (reliability.md R1) in its CI size: 25 SIGKILLs during the
mixed workload of `reliability/crashloop.py`, then its checks (credit drift exactly 0 for
every organization, I1-I10, every acknowledged operation exactly once, no webhook twice).
The seed is random and printed; `CRASHLOOP_SEED=N` replays one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KILLS = 25


@pytest.mark.slow
def test_crash_loop_25_kills():
    cmd = [sys.executable, str(ROOT / "reliability" / "crashloop.py"), "--kills", str(KILLS)]
    if os.environ.get("CRASHLOOP_SEED"):
        cmd += ["--seed", os.environ["CRASHLOOP_SEED"]]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=540)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the driver stops its node on SIGTERM
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        pytest.fail("crash loop did not finish in 9 minutes:\n" + out[-20000:])
    tail = out[-20000:]
    assert proc.returncode == 0, tail
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["problems"] == 0, tail
    assert summary["kills"] == KILLS + 1, tail  # the workload's kills and the final one
    assert Decimal(summary["drift"]) == 0, tail
    assert summary["outcomes"].get("ok", 0) > 0, tail
