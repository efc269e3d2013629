"""scripts/serve installs only when needed: the first time, or after pyproject.toml or
scripts/setup changed (its stamp in .venv); otherwise it starts at once. Run on a copy with
a stand-in setup and genservice that record their calls."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FAKE_SETUP = """#!/usr/bin/env bash
echo "setup $*" >> calls
mkdir -p .venv/bin
printf '#!/usr/bin/env bash\\necho "genservice $*" >> calls\\n' > .venv/bin/genservice
chmod +x .venv/bin/genservice
cp .venv/bin/genservice .venv/bin/python
"""


def run(tree: Path) -> str:
    out = subprocess.run(["bash", str(tree / "scripts" / "serve")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_serve_installs_only_when_the_project_changed(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "serve", tmp_path / "scripts" / "serve")
    (tmp_path / "scripts" / "setup").write_text(FAKE_SETUP)
    (tmp_path / "scripts" / "setup").chmod(0o755)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    calls = tmp_path / "calls"

    out = run(tmp_path)
    assert "first start: creating .venv" in out
    assert calls.read_text().splitlines() == ["setup serve", "genservice serve"]

    out = run(tmp_path)  # nothing changed: no install
    assert ".venv is up to date" in out
    assert calls.read_text().splitlines()[2:] == ["genservice serve"]

    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["y"]\n')
    out = run(tmp_path)
    assert "changed since the last install" in out
    assert calls.read_text().splitlines()[3:] == ["setup serve", "genservice serve"]
