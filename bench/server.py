"""A fresh test-mode `genservice serve` on a free loopback port for benchmarks (started by
tests/serve_process.py, which this makes importable for the bench scripts)."""

from __future__ import annotations

import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import httpx

sys.path.append(str(Path(__file__).resolve().parent.parent / "tests"))

from serve_process import HARNESS_ENV, ServeProcess  # noqa: E402

OPERATOR = "bench-operator"


def start_server(extra_env: dict | None = None) -> tuple[ServeProcess, str, str, str]:
    """(node, base_url, operator_token, data_dir); the data dir is a new temp dir unless
    `extra_env` names one. The caller stops it (`node.stop()`, or see `running_server`)."""
    env = {**HARNESS_ENV, **(extra_env or {})}
    data = env.get("GENSERVICE_DATA_DIR") or tempfile.mkdtemp(prefix="genservice-bench-")
    node = ServeProcess(data, env, operator_token=OPERATOR)
    return node, node.start(), OPERATOR, data


@contextmanager
def running_server(extra_env: dict | None = None):
    """Yield (base_url, operator_token, data_dir) of a fresh test-mode server."""
    node, url, token, data = start_server(extra_env)
    try:
        yield url, token, data
    finally:
        node.stop()


def create_org(url: str, token: str, name: str = "Bench") -> dict:
    r = httpx.post(url + "/operator/v1/organizations", json={"name": name, "owner_email": f"{name}@bench.test"},
                   headers={"Authorization": f"Bearer {token}"}, timeout=30)
    r.raise_for_status()
    return r.json()["data"]
