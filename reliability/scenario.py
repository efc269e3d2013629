"""One crash-point scenario against a real `genservice serve` (reliability.md §6.2).

    s = Scenario(tmp_dir, receiver)
    s.start(crashpoint="hold_committed")       # a node armed with the point; one organization
    s.expect_crash(lambda: s.post(...))        # the call may fail; the node must die with 137
    s.restart()                                # same data dir, no crash point
    s.check(charged=Decimal("1.00"))          # quiesce, I1-I10, webhooks, credit drift 0
    s.close()

`granted` (default: the signup's 200.00) are the model's credits in; `charged` what the
scenario's completed jobs must have cost.
"""

from __future__ import annotations

import io
from contextlib import closing
import random
import time
import uuid
from decimal import Decimal
from pathlib import Path

import httpx

import checker
from server import Node

SIGNUP = Decimal("200.00")


def png_bytes(seed: int | None = None, side: int = 24) -> bytes:
    """A small PNG with random pixels (distinct bytes per seed)."""
    from PIL import Image

    rnd = random.Random(seed)
    img = Image.frombytes("RGB", (side, side), bytes(rnd.randrange(256) for _ in range(side * side * 3)))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


class Scenario:
    def __init__(self, tmp: str | Path, receiver) -> None:
        self.rx = receiver
        self.node = Node(Path(tmp) / "data", env=receiver.env())
        self.client = httpx.Client(timeout=30)
        self.org: dict = {}
        self.point: str | None = None

    # -- node ------------------------------------------------------------------------------
    def start(self, crashpoint: str | None = None) -> None:
        self.point = crashpoint.partition(":")[0] if crashpoint else None
        self.node.start(crashpoint=crashpoint)
        if not self.org:
            r = self.client.post(self.node.url + "/operator/v1/organizations", headers=self.node.op,
                                 json={"name": "Crash", "owner_email": "owner@crash.test"})
            assert r.status_code == 201, r.text
            self.org = r.json()["data"]

    def restart(self) -> None:
        assert not self.node.alive()
        self.node.start()

    def expect_crash(self, action=None, timeout: float = 30.0) -> None:
        """Run `action` (its HTTP error, if the node dies while answering, is expected), then
        wait for the node to exit with 137 at the armed point."""
        if action is not None:
            try:
                action()
            except httpx.HTTPError:
                pass
        status = self.node.wait_exit(timeout)
        if status is None:
            self.node.kill()
            raise AssertionError(f"crash point {self.point} was not reached in {timeout:.0f} s:\n"
                                 f"{self.node.log_tail()}")
        assert status == 137, f"node exited with {status}, not 137:\n{self.node.log_tail()}"
        assert f"crash point {self.point} reached" in self.node.log_tail(200), self.node.log_tail()

    def close(self) -> None:
        self.client.close()
        self.node.stop()

    # -- HTTP ------------------------------------------------------------------------------
    @property
    def key(self) -> dict:
        return {"Authorization": f"Bearer {self.org['api_key']}"}

    def req(self, method: str, path: str, *, op: bool = False, timeout: float = 30.0, **kw) -> httpx.Response:
        headers = dict(self.node.op if op else self.key)
        headers.update(kw.pop("headers", {}))
        return self.client.request(method, self.node.url + path, headers=headers, timeout=timeout, **kw)

    def post(self, path: str, **kw) -> httpx.Response:
        return self.req("POST", path, **kw)

    def get(self, path: str, **kw) -> httpx.Response:
        return self.req("GET", path, **kw)

    def submit(self, prompt: str, model: str = "proc-image", **body) -> httpx.Response:
        return self.post(f"/v1/generation/models/{model}", json={"prompt": prompt, **body})

    def upload(self, data: bytes, name: str = "x.png", ctype: str = "image/png") -> httpx.Response:
        return self.post("/v1/generation/uploads", files={"file": (name, data, ctype)})

    def wait_status(self, job_id: str, statuses=("completed", "failed", "nsfw", "canceled"),
                    timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            st = self.get(f"/v1/generation/requests/{job_id}/status").json()
            if st.get("status") in statuses or time.monotonic() > deadline:
                return st
            time.sleep(0.05)

    def db(self, sql: str, params: tuple = ()) -> list[dict]:
        with closing(checker.connect(self.node.db_path)) as conn:
            return checker.rows(conn, sql, params)

    # -- the end state -----------------------------------------------------------------------
    def check(self, charged: Decimal = Decimal(0), granted: Decimal = SIGNUP, timeout: float = 60.0) -> dict:
        """Quiesce, then every invariant, the webhook outbox against the receiver, and
        credit drift 0 for the organization: `granted` are the model's credits in (signup and
        what the scenario added), `charged` what its completed jobs must have cost."""
        checker.quiesce(self.node, timeout=timeout)
        problems = checker.invariants(self.node) + checker.webhook_checks(self.node, self.rx)
        assert problems == [], "\n".join(problems) + "\n" + self.node.log_tail()
        fig = checker.credits(self.node, self.org["organization_id"], self.org["api_key"], self.client)
        in_lots = sum(fig["granted"].values(), Decimal(0))
        assert in_lots == granted, f"lots grant {in_lots}, the model {granted}"
        assert fig["captured"] == charged, f"completed jobs were charged {fig['captured']}, expected {charged}"
        model = checker.model_balance(granted, fig)
        d = checker.drift(fig, model)
        assert d == 0, f"credit drift {d}: model {model}, figures {fig}"
        return fig


def new_tag() -> str:
    return uuid.uuid4().hex[:12]
