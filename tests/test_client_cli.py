"""`genservice-client` as a subprocess against a real `genservice serve`: generate with -o,
run a product with --input, jobs list, balance, upload, `--json`, the key from the
environment or the config file, an error's exit status and message, and the shell
completion scripts (bash completes in a real bash)."""

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
    # PYTHONPATH passes on: the package of the tree under test, not only the installed one
    inherited = {k: os.environ[k] for k in ("PATH", "PYTHONPATH") if k in os.environ}
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**inherited, "HOME": str(cwd), **env})


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


def test_run_a_product_with_inputs(live, tmp_path):  # noqa: F811
    node, org = live
    env = {"GENSERVICE_URL": node.url, "GENSERVICE_API_KEY": org["api_key"]}
    out = cli(["run", "text-to-clip", "--input", "prompt=a fox at dawn", "--input", "seed=7"], env, tmp_path)
    assert out.returncode == 0, out.stderr
    run_id, status = out.stdout.split()
    assert status == "completed"
    shown = json.loads(cli(["--json", "run", "text-to-clip", "--input", "prompt=a fox", "--input", "seed=7"],
                           env, tmp_path).stdout)
    assert shown["id"] != run_id and shown["status"] == "completed" and shown["inputs"]["seed"] == 7
    assert set(shown["outputs"]) == {"still", "clip", "cover", "thumbnail"}
    out = cli(["run", "text-to-clip", "--input", "prompt=a fox [[fail:internal]]"], env, tmp_path)
    assert out.returncode == 1 and out.stdout.split()[1] == "failed", out.stdout + out.stderr  # a failed run
    out = cli(["generate", "image.generate", "a fox [[fail:internal]]"], env, tmp_path)
    assert out.returncode == 1 and out.stderr.strip().endswith(
        "job.failed: Generation failed due to an internal error. Credits were released.")
    out = cli(["run", "no-such-product", "--input", "prompt=fox"], env, tmp_path)
    assert out.returncode == 1 and "404 " in out.stderr
    out = cli(["run", "text-to-clip", "--input", "prompt"], env, tmp_path)
    assert out.returncode == 1 and out.stderr.strip() == "expected NAME=VALUE, got 'prompt'"


def _complete(script: str, words: list[str], cwd: Path | None = None) -> list[str]:
    """What bash offers after `words` (the last one being typed), with the printed script loaded."""
    line = " ".join(words)
    program = (f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
               f"COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}; _shtab_genservice_client; "
               'printf "%s\\n" "${COMPREPLY[@]}"')
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_shell_completion(tmp_path):
    bash = cli(["completion", "bash"], {}, tmp_path)  # no key needed
    assert bash.returncode == 0, bash.stderr
    assert _complete(bash.stdout, ["genservice-client", ""]) == ["generate", "run", "jobs", "balance", "upload",
                                                                 "completion"]
    assert _complete(bash.stdout, ["genservice-client", "ba"]) == ["balance"]
    assert _complete(bash.stdout, ["genservice-client", "jobs", ""]) == ["list"]
    assert set(_complete(bash.stdout, ["genservice-client", "generate", "--"])) >= {"--output", "--model", "--param"}
    assert "bash" in _complete(bash.stdout, ["genservice-client", "completion", ""])
    (tmp_path / "fox.png").write_bytes(b"x")
    assert _complete(bash.stdout, ["genservice-client", "upload", "fo"], tmp_path) == ["fox.png"]  # files complete
    zsh = cli(["completion", "zsh"], {}, tmp_path)
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef genservice-client")
    assert "_shtab_genservice_client_upload" in zsh.stdout and "generate" in zsh.stdout
    bad = cli(["completion", "cmd.exe"], {}, tmp_path)
    assert bad.returncode == 2 and "invalid choice: 'cmd.exe'" in bad.stderr
