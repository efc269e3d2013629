"""Helpers for the engine tests and the engines bench: a real Cog server in a subprocess,
a node with an engine catalog served over real HTTP (engines call back: Cog's webhooks)."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import httpx
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from service.hookgate.gate import HookGate
from service.hookgate.gate import bind as bind_hook_gate
from test_generation_support import running_node

HERE = Path(__file__).parent
PREDICTOR = HERE / "engines" / "cog_predictor.py"
TINY_GGUF = HERE / "engines" / "tiny_gguf.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _ServerProcess:
    """A server subprocess in its own process group: started, waited for until `ready()`
    answers, and killed with everything it started."""

    what = "server"
    proc: subprocess.Popen | None = None

    def ready(self) -> bool:
        raise NotImplementedError

    def _wait(self, timeout: float, log_path: Path):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.ready():
                    return self
            except (httpx.HTTPError, ValueError):
                pass
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the {self.what} did not start; see {log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)


class CogServer(_ServerProcess):
    """`python -m cog.server.http` with the test predictor; no Docker."""

    what = "Cog server"

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path

    def ready(self) -> bool:
        return httpx.get(f"{self.url}/health-check", timeout=1).json().get("status") == "READY"

    def start(self, timeout: float = 60.0) -> CogServer:
        env = {**os.environ, "PORT": str(self.port), "COG_PREDICT_TYPE_STUB": f"{PREDICTOR.name}:Predictor",
               "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "cog.server.http", "--host", "127.0.0.1"],
                                         cwd=PREDICTOR.parent, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self._wait(timeout, self.log_path)


_pause = time.sleep  # between looks at a background build (tests replace it, not time.sleep)
LLAMA_ENV = Path(sys.prefix) / "llama"  # where scripts/setup installs llama-cpp-python's server


class LlamaMissing(RuntimeError):
    """llama-cpp-python's server is not installed, or its build failed."""


def llama_python(timeout: float = 1800.0) -> str:
    """The Python that runs llama-cpp-python's server: this environment's when it has the
    package, else the one scripts/setup builds beside it (.venv/llama), waited for while its
    build runs (scripts/test starts it in the background; these tests run last)."""
    if importlib.util.find_spec("llama_cpp") is not None:
        return sys.executable
    deadline = time.monotonic() + timeout
    while not (LLAMA_ENV / "ready").exists():
        log = LLAMA_ENV / "build.log"
        if (LLAMA_ENV / "failed").exists():
            tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else []
            raise LlamaMissing("building llama-cpp-python failed (scripts/setup); the end of its log:\n"
                                + "\n".join(tail))
        if not _building() or time.monotonic() > deadline:
            raise LlamaMissing(f"llama-cpp-python's server is not installed in {LLAMA_ENV}: run scripts/setup")
        _pause(2)
    return str(LLAMA_ENV / "bin" / "python")


def _building() -> bool:
    try:
        os.kill(int((LLAMA_ENV / "build.pid").read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


class LlamaServer(_ServerProcess):
    """llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`) with the
    tiny GGUF model the tests write (tests/engines/tiny_gguf.py). `--interrupt_requests
    False`: by default a waiting request cuts the running stream short."""

    what = "llama-cpp-python server"

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.workdir = workdir

    def ready(self) -> bool:
        return httpx.get(f"{self.url}/models", timeout=1).status_code == 200

    def start(self, timeout: float = 90.0) -> LlamaServer:
        model = self.workdir / "tiny.gguf"
        subprocess.run([sys.executable, str(TINY_GGUF), str(model)], check=True, capture_output=True)
        with open(self.workdir / "llama.log", "ab") as log:
            self.proc = subprocess.Popen(
                [llama_python(), "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "tiny",
                 "--n_ctx", "16384", "--host", "127.0.0.1", "--port", str(self.port), "--interrupt_requests", "False"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self._wait(timeout, self.workdir / "llama.log")


def cog_catalog(url: str | list[str], *, concurrency: int = 1, model_id: str = "cog-image",
                extra: str = "") -> str:
    urls = [url] if isinstance(url, str) else url
    return f"""
[[models]]
id = "{model_id}"
capability = "image.generate"
backend = "cog"
resolutions = ["1k"]
concurrency = {concurrency}
prices = [{{ resolution = "1k", credits = "3.00" }}]
[models.engine]
urls = {urls!r}
{extra}
[models.engine.bind]
prompt = "prompt"
seed = "seed"
width = "width"
height = "height"
""".replace("'", '"')


@asynccontextmanager
async def engine_node(tmp_path: Path, catalog: str, files: dict[str, str] | None = None, **settings):
    """A test node with this catalog, its app also served on a real loopback port (the
    engines post back to it); yields the test `Node`. With `engine_hooks_listen` set, its
    hook gate runs too (`n.gate`)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(text)
    (tmp_path / "catalog.toml").write_text(catalog)
    async with running_node(tmp_path / "node", test_mode=True, catalog_file=str(tmp_path / "catalog.toml"),
                            **settings) as n:
        async with trio.open_nursery() as nursery:
            cfg = Config()
            cfg.bind = ["127.0.0.1:0"]
            cfg.accesslog = None
            urls = await nursery.start(partial(serve, n.app, cfg, shutdown_trigger=trio.sleep_forever))
            n.parts.settings.base_url = urls[0]
            if n.parts.settings.engine_hooks_listen:  # the hook gate, as `genservice serve` starts it
                n.gate = HookGate.for_node(n.parts, bind_hook_gate(n.parts.settings))
                await nursery.start(n.gate.run)
            try:
                yield n
            finally:
                nursery.cancel_scope.cancel()
