"""docs/clients.md's examples, run as written: every `python` block as its own process
against a real `genservice serve` (built-ins, the camera-move video model of the
text-to-clip product, and the llama-cpp-python chat model), with
the node's address and a fresh organization's key in the environment; and the page's
`genservice-client` command lines, one bash script, in the same environment."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from serve_process import HARNESS_ENV, ServeProcess
from test_engines_openai import llama  # noqa: F401 - the session's llama-cpp-python server
from test_client_package import CAMERA, png  # the video model of the text-to-clip product
from test_openai_front import catalog

DOC = Path(__file__).resolve().parent.parent / "docs" / "clients.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
# the command line's examples: the indented lines that run genservice-client
COMMANDS = [line.strip() for line in DOC.read_text().splitlines()
            if line.startswith("    ") and "genservice-client " in line and not line.strip().startswith("#")]


@pytest.fixture(scope="module")
def served(llama, tmp_path_factory):  # noqa: F811
    tmp = tmp_path_factory.mktemp("clients-doc")
    (tmp / "catalog.toml").write_text(catalog(llama.url) + CAMERA)
    with ServeProcess(tmp / "data", {**HARNESS_ENV, "GENSERVICE_CATALOG_FILE": str(tmp / "catalog.toml")},
                      operator_token="doc-operator", log_dir=tmp) as node:
        r = httpx.post(f"{node.url}/operator/v1/organizations", headers=node.op, timeout=30,
                       json={"name": "Docs", "owner_email": "docs@acme.test", "approved": True})
        assert r.status_code == 201, r.text
        yield node.url, r.json()["data"]["api_key"]


def test_the_page_has_its_examples():
    assert len(BLOCKS) == 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(served, index, tmp_path):
    url, key = served
    script = tmp_path / "example.py"
    script.write_text(BLOCKS[index])
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={"GENSERVICE_URL": url, "GENSERVICE_API_KEY": key, "PATH": "/usr/bin:/bin",
                              **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {})},
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip()


def test_the_command_lines_run(served, tmp_path):
    url, key = served
    assert len(COMMANDS) == 7 and COMMANDS[0].startswith("genservice-client generate")
    (tmp_path / "photo.png").write_bytes(png())
    (tmp_path / ".zfunc").mkdir()
    script = "set -euo pipefail\n" + "\n".join(COMMANDS) + "\ncomplete -p genservice-client\n"
    bin_dir = str(Path(sys.executable).parent)
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={"GENSERVICE_URL": url, "GENSERVICE_API_KEY": key, "HOME": str(tmp_path),
                              "PATH": f"{bin_dir}:/usr/bin:/bin",
                              **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {})},
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "saved fox.png" in out.stdout and " completed\n" in out.stdout and "credits available" in out.stdout
    assert (tmp_path / "fox.png").stat().st_size > 0
    assert (tmp_path / ".zfunc" / "_genservice-client").read_text().startswith("#compdef genservice-client")
    assert out.stdout.rstrip().endswith("genservice-client")  # bash completion is loaded
