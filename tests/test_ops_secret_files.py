"""The data directory and its secret files are the node user's alone (0700 / 0600), whoever
made them first (docs/operator.md, "Backups, replica and settings: decisions")."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

from service.config import load_settings
from service.local_node import private_data_dir
from service.sealing import NodeKey


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_node_key_left_readable_is_made_0600(tmp_path):
    NodeKey(tmp_path / "node-key")
    os.chmod(tmp_path / "node-key", 0o644)  # a copy or an editor left it readable
    NodeKey(tmp_path / "node-key")
    assert mode(tmp_path / "node-key") == 0o600


def test_the_data_dir_is_made_0700_new_or_not(tmp_path):
    settings = load_settings(environ={"GENSERVICE_DATA_DIR": str(tmp_path / "new")})
    private_data_dir(settings)
    assert mode(tmp_path / "new") == 0o700
    (tmp_path / "old").mkdir(mode=0o755)
    os.chmod(tmp_path / "old", 0o755)
    private_data_dir(load_settings(environ={"GENSERVICE_DATA_DIR": str(tmp_path / "old")}))
    assert mode(tmp_path / "old") == 0o700


def test_admin_makes_a_new_data_dir_and_token_private_under_a_loose_umask(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENSERVICE_")}
    env.update(GENSERVICE_DATA_DIR=str(tmp_path / "data"), GENSERVICE_PORT="9")
    done = subprocess.run([sys.executable, "-m", "service", "admin", "pending"], env=env, capture_output=True,
                          text=True, timeout=60, preexec_fn=lambda: os.umask(0o022))
    assert done.returncode == 2  # no node there
    assert mode(tmp_path / "data") == 0o700
    assert mode(tmp_path / "data" / "operator-token") == 0o600
