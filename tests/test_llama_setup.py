"""How the tests find llama-cpp-python's server (tests/engine_support.py `llama_python`):
scripts/setup builds it into .venv/llama, in the background under scripts/test; a failed or
missing build is said at once, with the end of its log, instead of a wait."""

from __future__ import annotations

import importlib.util
import os

import pytest

import engine_support


@pytest.fixture
def llama_env(tmp_path, monkeypatch):
    monkeypatch.setattr(engine_support, "LLAMA_ENV", tmp_path)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # not in this environment
    return tmp_path


def test_a_finished_build_is_used(llama_env):
    (llama_env / "ready").touch()
    assert engine_support.llama_python() == str(llama_env / "bin" / "python")


def test_a_failed_build_is_said_with_its_log(llama_env):
    (llama_env / "build.log").write_text("\n".join(f"line {n}" for n in range(100)))
    (llama_env / "failed").touch()
    with pytest.raises(engine_support.LlamaMissing, match="building llama-cpp-python failed") as e:
        engine_support.llama_python()
    assert "line 99" in str(e.value) and "line 59" not in str(e.value)


def test_no_build_running_is_said_at_once(llama_env):
    (llama_env / "build.pid").write_text("999999999")  # no such process
    with pytest.raises(engine_support.LlamaMissing, match="is not installed in .*: run scripts/setup"):
        engine_support.llama_python()


def test_this_environments_own_package_comes_first(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert engine_support.llama_python() == engine_support.sys.executable


def test_a_build_under_way_is_waited_for(llama_env, monkeypatch):
    (llama_env / "build.pid").write_text(str(os.getpid()))  # a live process: the build is running
    monkeypatch.setattr(engine_support, "_pause", lambda s: (llama_env / "ready").touch())
    assert engine_support.llama_python() == str(llama_env / "bin" / "python")
