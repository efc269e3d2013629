"""Helpers of the generation, jobs, uploads and assets tests (no tests here)."""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from conftest import start_node
from waiting import wait_until
from service.storage import generation as gsql

FINAL = ("completed", "failed", "nsfw", "canceled")
IMAGE = "/v1/generation/capabilities/image.generate"
VIDEO = "/v1/generation/capabilities/video.generate"
UPLOADS = "/v1/generation/uploads"


def local(url: str) -> str:
    """An absolute URL of the test node as a path for the test client."""
    return url.removeprefix("http://testserver")


async def submit(node, key: str, json: dict, path: str = IMAGE, headers=None, expect: int = 202):
    r = await node.call("POST", path, key, json=json, headers=headers)
    body = await r.get_json()
    assert r.status_code == expect, (r.status_code, body)
    return body


async def status(node, key: str, job_id: str) -> dict:
    r = await node.call("GET", f"/v1/generation/requests/{job_id}/status", key)
    assert r.status_code == 200, await r.get_data(as_text=True)
    return await r.get_json()


async def wait_status(node, key: str, job_id: str, wanted=FINAL, timeout: float = 30.0) -> dict:
    async def reached() -> dict | None:
        st = await status(node, key, job_id)
        return st if st["status"] in wanted else None

    return await wait_until(reached, timeout)


async def balance(node, key: str) -> dict:
    r = await node.call("GET", "/v1/billing/balance", key)
    assert r.status_code == 200
    return (await r.get_json())["data"]


async def holds(node, key: str) -> list[dict]:
    r = await node.call("GET", "/v1/billing/holds?limit=500", key)
    assert r.status_code == 200
    return (await r.get_json())["data"]


async def hold_of(node, key: str, job_id: str) -> dict:
    found = [h for h in await holds(node, key) if h["job_id"] == job_id]
    assert len(found) == 1, found
    return found[0]


async def wait_hold(node, key: str, job_id: str, wanted: str, timeout: float = 10.0) -> dict:
    async def reached() -> dict | None:
        h = await hold_of(node, key, job_id)
        return h if h["status"] == wanted else None

    return await wait_until(reached, timeout)


def job_row(node, job_id: str) -> dict:
    return gsql.get_job(node.store, job_id)


def multipart(parts: list[tuple], boundary: str = "testboundary7MA4YWxk") -> tuple[bytes, str]:
    """Parts are (name, value) for a text field or (name, filename, content_type, bytes) for a
    file; content_type None leaves the part's Content-Type out."""
    out = bytearray()
    for part in parts:
        out += f"--{boundary}\r\n".encode()
        if len(part) == 2:
            name, value = part
            out += f'Content-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            out += value.encode() if isinstance(value, str) else value
        else:
            name, filename, ctype, data = part
            out += f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'.encode()
            if ctype is not None:
                out += f"Content-Type: {ctype}\r\n".encode()
            out += b"\r\n" + data
        out += b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


async def upload(node, key: str, data: bytes, ctype: str | None = "image/png", filename: str = "f.bin",
                 fields: list[tuple] = (), headers=None):
    body, content_type = multipart([("file", filename, ctype, data), *fields])
    h = {"Content-Type": content_type, **(headers or {})}
    return await node.call("POST", UPLOADS, key, data=body, headers=h)


async def upload_ok(node, key: str, data: bytes, ctype: str = "image/png", **kw) -> dict:
    r = await upload(node, key, data, ctype, **kw)
    body = await r.get_json()
    assert r.status_code == 201, body
    return body["data"]


def leftovers(tmp_path: Path) -> list[Path]:
    """Files in the upload temp directory."""
    return list((tmp_path / "assets" / "tmp").iterdir())


def asset_files(tmp_path: Path) -> list[Path]:
    root = tmp_path / "assets"
    return [p for p in root.rglob("*") if p.is_file() and "tmp" not in p.relative_to(root).parts]


@asynccontextmanager
async def running_node(tmp_path: Path, **settings):
    """A node that stops (its tasks cancelled, its store closed) when the block ends."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    async with trio.open_nursery() as nursery:
        node = await start_node(nursery, tmp_path, **settings)
        try:
            yield node
        finally:
            with trio.CancelScope(shield=True):
                await node.parts.aclose()
            nursery.cancel_scope.cancel()
    node.store.close()


def new_id() -> str:
    return str(uuid.uuid4())


def slow_captures(monkeypatch, node, seconds: float = 0.3) -> None:
    """Every balance batch that captures a hold commits `seconds` late, in the writer's
    thread, while the event loop keeps serving: a window in which a job's end is decided
    and not yet committed (what a reader may see in it is the question)."""
    import time

    from service.storage import billing as bsql
    real = bsql.persist

    def persist(conn, org_id, w):
        if any(u[0] == "captured" for u in w.hold_updates):
            time.sleep(seconds)
        return real(conn, org_id, w)

    monkeypatch.setattr(bsql, "persist", persist)
    monkeypatch.setattr(node.store, "inline", False)
    monkeypatch.setattr(node.store, "_fast_path_ok", lambda: False)
