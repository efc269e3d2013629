"""The type check of service/ (issue: a static check in CI), at two levels, both at zero
errors; a new error fails here with mypy's own lines.

- everywhere: pyproject.toml's [tool.mypy], which checks unannotated bodies too
  (`check_untyped_defs`) and holds the strict packages to `--strict`'s flags;
- the strict packages (the one list: the override in pyproject.toml that turns on
  `disallow_untyped_defs`) once more under `mypy --strict` itself, so a flag `--strict` gains
  in a later mypy applies to them without an edit here. Imported modules outside the list
  are read, not judged (`--follow-imports=silent`)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def strict_packages() -> list[str]:
    """The module patterns of the strict override, as `-p`/`-m` targets."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    strict = [o for o in config.get("overrides", []) if o.get("disallow_untyped_defs")]
    assert len(strict) == 1, "one override lists the strict packages"
    modules = strict[0]["module"]
    return sorted({m.removesuffix(".*") for m in ([modules] if isinstance(modules, str) else modules)})


def mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_mypy_finds_no_error_in_service(tmp_path):
    out = mypy("--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found" in out.stdout


def test_mypy_strict_finds_no_error_in_the_strict_packages(tmp_path):
    targets = strict_packages()
    assert "service.credits" in targets
    args = [a for t in targets for a in (("-p", t) if (ROOT / t.replace(".", "/")).is_dir() else ("-m", t))]
    out = mypy("--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"), *args)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found" in out.stdout
