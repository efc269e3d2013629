"""The node of the reliability harness (reliability.md §6.1): tests/serve_process.py's
`genservice serve` subprocess with the harness's settings.

Test mode on 127.0.0.1 port 0 (a new port after every restart), none of the caller's own
GENSERVICE_* settings, logging at INFO, its data in a directory that outlives it, in its
own session so a kill takes the whole process group with SIGKILL. Its log goes to
`DATA_DIR/serve-N.log` (one per start), which is kept for a failed run.

    node = Node(data_dir, env={...})
    node.start()                 # waits for "listening on"; node.url, node.op (headers)
    node.kill()                  # os.killpg(..., SIGKILL); returns the exit status
    node.wait_exit(10)           # for a crash point: the status it died with (137)
    node.stop()                  # SIGTERM, then SIGKILL after 20 s
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent / "tests"))

from serve_process import HARNESS_ENV, ServeProcess, StartFailed  # noqa: E402, F401 - StartFailed for the callers

OPERATOR_TOKEN = "reliability-operator-token"


class Node(ServeProcess):
    def __init__(self, data_dir: str | Path, env: dict | None = None) -> None:
        super().__init__(data_dir, {**HARNESS_ENV, "GENSERVICE_HOST": "127.0.0.1", "GENSERVICE_LOG_LEVEL": "INFO",
                                    **(env or {})},
                         operator_token=OPERATOR_TOKEN, new_session=True, inherit_env=False)
