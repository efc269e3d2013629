"""Crash points: armed only in test mode, fire on the n-th pass, and every name used in
the code is listed."""

import ast
import pathlib
import subprocess
import sys

import pytest

from service import crash


def test_unknown_point_refused():
    with pytest.raises(ValueError, match="unknown crash point 'nope'; known: "):
        crash.configure("nope", True)


def test_inactive_outside_test_mode():
    crash.configure("hold_committed:1", False)
    assert crash._target is None  # not armed
    crash.crashpoint("hold_committed")  # nothing happens: this process goes on
    assert crash._target is None


def test_nth_pass_exits_137():
    code = ("from service import crash\n"
            "crash.configure('upload_complete:3', True)\n"
            "for i in range(5):\n"
            "    print(i, flush=True)\n"
            "    crash.crashpoint('upload_complete')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 137
    assert out.stdout.split() == ["0", "1", "2"]


def test_every_used_name_is_listed():
    root = pathlib.Path(crash.__file__).parent
    used = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "crashpoint"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                used.add(node.args[0].value)
    assert used <= set(crash.POINTS)
    crash.configure(None, True)
