"""`genservice-client` as a subprocess against a real `genservice serve`: generate with -o,
jobs list, balance, upload, `--json`, the key from the environment or the config file, and
an error's exit status and message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from PIL import Image

from test_client_package import live, png  # noqa: F401 - the served node fixture

CLI = str(Path(sys.executable).parent / "genservice-client")


def cli(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={"PATH": os.environ["PATH"], "HOME": str(cwd), **env})


def test_generate_list_balance_upload(live, tmp_path):  # noqa: F811
    node, org = live
    env = {"GENSERVICE_URL": node.url, "GENSERVICE_API_KEY": org["api_key"]}
    out = cli(["generate", "image.generate", "a red fox", "-o", "fox.png", "--param", "aspect_ratio=16:9"], env, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "completed" in out.stdout and "saved fox.png" in out.stdout and "100%" in out.stderr
    with Image.open(tmp_path / "fox.png") as img:
        assert img.width > img.height
    rid = out.stdout.split()[0]
    listed = json.loads(cli(["--json", "jobs", "list"], env, tmp_path).stdout)
    assert rid in [j["request_id"] for j in listed]
    bal = json.loads(cli(["--json", "balance"], env, tmp_path).stdout)
    assert "available" in bal
    (tmp_path / "in.png").write_bytes(png())
    up = cli(["--json", "upload", "in.png", "--content-type", "image/png"], env, tmp_path)
    assert json.loads(up.stdout)["kind"] == "image"


def test_the_config_file_and_errors(live, tmp_path):  # noqa: F811
    node, org = live
    (tmp_path / ".config" / "genservice").mkdir(parents=True)
    (tmp_path / ".config" / "genservice" / "client.toml").write_text(f'api_key = "{org["api_key"]}"\nurl = "{node.url}"\n')
    out = cli(["balance"], {}, tmp_path)
    assert out.returncode == 0 and out.stdout.endswith("credits available\n"), out.stderr
    out = cli(["generate", "image.generate", "fox", "--model", "no-such-model"], {}, tmp_path)
    assert out.returncode == 1
    assert out.stderr.strip().endswith("422 request.validation_failed: Unknown model 'no-such-model'. Known: proc-image, pricey, ghost.")
    out = cli(["balance"], {"GENSERVICE_API_KEY": "aak_bad", "GENSERVICE_URL": node.url}, tmp_path)
    assert out.returncode == 1 and "401 auth.unauthorized" in out.stderr
    assert cli(["balance"], {}, tmp_path / ".config").returncode == 2  # no key anywhere
