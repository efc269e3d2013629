"""A real Cog server with the instant 64-slot predictor (bench/cog_instant.py), the catalog
entry that lets the node give it 64 jobs at once, and a node in front of it.

Used by bench/engines.py (`jobs_per_s_instant_64`) and bench/profile_job.py.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from engine_support import CogServer

SLOTS = 64
MODEL = "cog-instant"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_file_certs(tmp: Path) -> dict[str, str]:
    """Cog's environment for reading its trusted CA certificates from one file.

    Cog 0.23 builds an HTTP client for every prediction that has a webhook, and each build
    loads the native roots: the bundle file and then every file of the CA directory
    (/etc/ssl/certs: about 290 opens and reads). That is 4-5 ms of Cog's CPU a prediction,
    five times what the rest of an instant prediction costs. The same roots from the bundle
    alone (an empty SSL_CERT_DIR) cost under 1 ms. docs/engines.md gives operators the same
    setting. {} where the system has no bundle file (`BENCH_COG_CERTS=default`: Cog's own).
    """
    bundle = ssl.get_default_verify_paths().cafile  # SSL_CERT_FILE, else OpenSSL's; None if absent
    if os.environ.get("BENCH_COG_CERTS") == "default" or bundle is None:
        return {}
    empty = tmp / "no-ca-dir"
    empty.mkdir(parents=True, exist_ok=True)
    return {"SSL_CERT_FILE": bundle, "SSL_CERT_DIR": str(empty)}


class InstantCog(CogServer):
    """`python -m cog.server.http` with bench/cog_instant.py and COG_MAX_CONCURRENCY=`slots`
    (64 unless given), each prediction `seconds` long (0: at once), its CA certificates read
    from one file (`one_file_certs`)."""

    what = "instant Cog server"

    def __init__(self, log_path: Path, slots: int = SLOTS, seconds: float = 0.0) -> None:
        super().__init__(log_path)
        self.slots, self.seconds = slots, seconds

    def start(self, timeout: float = 60.0) -> InstantCog:
        return self.launch().ready_within(timeout)

    def ready_within(self, timeout: float) -> InstantCog:
        return self._wait(timeout, self.log_path)

    def launch(self) -> InstantCog:
        """The process started, not yet ready: a fleet starts all its servers before it waits."""
        env = {**os.environ, "PORT": str(self.port), "COG_PREDICT_TYPE_STUB": "cog_instant.py:Predictor",
               "COG_MAX_CONCURRENCY": str(self.slots), "BENCH_PREDICT_S": str(self.seconds),
               "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
               **one_file_certs(Path(self.log_path).parent)}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "cog.server.http", "--host", "127.0.0.1"],
                                         cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self


def catalog_entry(url: str | list[str], price: str = "0.01", outcome: str = "webhook", slots: int = SLOTS) -> str:
    """`outcome`: how the prediction's end reaches the node (docs/engines.md, Cog); `slots`:
    the model's concurrency, each of its `url`s."""
    urls = ", ".join(f'"{u}"' for u in ([url] if isinstance(url, str) else url))
    return (f'[[models]]\nid = "{MODEL}"\ncapability = "image.generate"\nbackend = "cog"\nresolutions = ["1k"]\n'
            f'concurrency = {slots}\nprices = [{{ resolution = "1k", credits = "{price}" }}]\n'
            f'[models.engine]\nurls = [{urls}]\noutcome = "{outcome}"\n'
            f'[models.engine.bind]\nprompt = "prompt"\nseed = "seed"\n')


def gate_env(gate: bool | None = None) -> dict[str, str]:
    """The node's settings for a hook gate on a port of its own (`gate`, else BENCH_HOOK_GATE=1)."""
    gate = os.environ.get("BENCH_HOOK_GATE") == "1" if gate is None else gate
    return {"GENSERVICE_ENGINE_HOOKS_LISTEN": "127.0.0.1:0"} if gate else {}


@contextmanager
def instant_node(tmp: Path, extra_env: dict | None = None, outcome: str | None = None, gate: bool | None = None):
    """(node, url, operator_token, data_dir, cog) with only the instant Cog model; `outcome`
    defaults to BENCH_COG_OUTCOME, else "webhook" (the node's default). `gate` (default
    BENCH_HOOK_GATE=1): Cog's webhooks go to the node's hook gate (service/hookgate/)
    instead of its own port."""
    from server import start_server

    tmp.mkdir(parents=True, exist_ok=True)
    cog = InstantCog(tmp / "cog-instant.log").start()
    try:
        outcome = outcome or os.environ.get("BENCH_COG_OUTCOME", "webhook")
        (tmp / "catalog.toml").write_text(catalog_entry(cog.url, outcome=outcome))
        port = free_port()
        node, url, op, data = start_server({"GENSERVICE_CATALOG_FILE": str(tmp / "catalog.toml"),
                                            "GENSERVICE_PORT": str(port),
                                            "GENSERVICE_BASE_URL": f"http://127.0.0.1:{port}",
                                            # 64 clients of one key each follow their job on a stream:
                                            # past the default 20 a key (docs/streams.md)
                                            "GENSERVICE_MAX_STREAMS_PER_KEY": "0", "GENSERVICE_MAX_STREAMS_PER_ORG": "0",
                                            **gate_env(gate), **(extra_env or {})})
        try:
            yield node, url, op, data, cog
        finally:
            node.stop()
    finally:
        cog.stop()
