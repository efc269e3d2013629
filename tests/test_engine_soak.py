"""The engine soak (reliability/engine_soak.py) at CI size: every fault class once against
every engine kind, and every invariant: no job the engine finished is failed, none lost,
stuck or charged twice (docs/reliability.md, "Engine soak")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))

import engine_soak  # noqa: E402


@pytest.mark.slow
@pytest.mark.llama
def test_every_fault_class_against_every_engine(tmp_path, capsys):
    code = engine_soak.main(["--minutes", "0.75", "--fault-every", "3", "--seed", "23", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    print(json.dumps(result))
    assert all(n >= 1 for n in result["faults"].values()), result["faults"]
    assert set(result["faults"]) == set(engine_soak.FAULTS)
    assert (result["lost"], result["stuck"], result["double_charged"], result["wrong_charge"]) == (0, 0, 0, 0)
    assert (result["credit_drift"], result["db_invariant_problems"]) == ("0.00", 0)
    assert all(result["statuses"][e].get("completed", 0) > 0 for e in ("comfyui", "cog", "llama", "replicate", "fal"))
    assert result["completed_but_failed"] == 0, result
    assert code == 0
