"""Jobs through the public API as the project's client runs them, on raw trio sockets.

`level` workers in a closed loop: each submits a job (`POST /v1/generation/models/{model}`
on its own keep-alive connection), then follows it on the job's event stream
(`GET /v1/generation/requests/{id}/events`) on the same connection, read to the stream's end
after the final status, as the Python client's `wait` does (httpx's pool hands the connection
back once the stream is read, and the next submit reuses it). No polling: the node's work per job is the
job's, not a poller's. Raw sockets keep the client's own CPU small on a 2-core machine
(httpx would cost the node's cores about a millisecond per request).
"""

from __future__ import annotations

import json
import time

import trio

from loadgen import read_head, read_response, receive_more

FINAL = (b'"status":"failed"', b'"status":"completed"', b'"status":"canceled"', b'"status":"nsfw"')


async def read_chunked(stream, buf: bytearray) -> bytes:
    """A chunked body's next chunk (b"" for the last one); the rest stays in `buf`."""
    while b"\r\n" not in buf:
        await receive_more(stream, buf)
    size_line = bytes(buf).partition(b"\r\n")[0]
    start = len(size_line) + 2
    size = int(size_line.split(b";")[0], 16)
    while len(buf) < start + size + 2:
        await receive_more(stream, buf)
    data = bytes(buf[start:start + size])
    del buf[:start + size + 2]
    return data


async def follow(stream, buf: bytearray, host: str, key: str, job_id: str) -> dict:
    """The job's final status object, from its event stream, read to its end (the node ends
    it after the final status) so that the connection is free for the next request."""
    await stream.send_all((f"GET /v1/generation/requests/{job_id}/events HTTP/1.1\r\nHost: {host}\r\n"
                           f"Authorization: Bearer {key}\r\n\r\n").encode())
    head = await read_head(stream, buf)
    if not head.startswith(b"HTTP/1.1 200") or b"transfer-encoding: chunked" not in head.lower():
        raise ConnectionError(f"the event stream of {job_id} was refused: {head[:300]!r} {bytes(buf)[:200]!r}")
    text, final = b"", None
    while data := await read_chunked(stream, buf):
        text += data
        while b"\n" in text:
            line, text = text.split(b"\n", 1)
            if line.startswith(b"data: ") and any(f in line for f in FINAL):
                final = json.loads(line[6:])
    if final is None:
        raise ConnectionError(f"the event stream of {job_id} ended without a final status")
    return final


async def run_jobs(host: str, port: int, key: str, model: str, jobs: int, level: int, body, *,
                   wait: bool = False) -> dict:
    """`jobs` jobs, `level` in flight: {"statuses": [final status], "wall": s, "errors": [...]}.
    `wait`: each submit asks `Prefer: wait=60` as the client's `generate` does without an
    event callback, and a job not final in the answer (202) is followed on its stream."""
    prefer = "Prefer: wait=60\r\n" if wait else ""
    todo = list(range(jobs))
    done: list[dict] = []
    errors: list[str] = []

    async def worker() -> None:
        conn: list = [None, bytearray()]

        async def submit(request: bytes) -> tuple[int, bytes]:
            """On the keep-alive connection; a new one if the server closed it while idle
            (nothing of the answer came: the request was not taken, as httpx also assumes)."""
            for attempt in (1, 2):
                if conn[0] is None:
                    conn[0], conn[1] = await trio.open_tcp_stream(host, port), bytearray()
                try:
                    await conn[0].send_all(request)
                    return await read_response(conn[0], conn[1])
                except (ConnectionError, trio.BrokenResourceError):
                    await conn[0].aclose()
                    conn[0] = None
                    if attempt == 2 or conn[1]:
                        raise
            raise AssertionError("unreachable")

        try:
            while todo:
                i = todo.pop()
                payload = json.dumps(body(i)).encode()
                status, answer = await submit(
                    (f"POST /v1/generation/models/{model} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
                     f"{prefer}Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n").encode()
                    + payload)
                if status == 200 and wait:
                    done.append(json.loads(answer))
                    continue
                if status != 202:
                    errors.append(f"submit {status}: {answer[:200]!r}")
                    continue
                done.append(await follow(conn[0], conn[1], host, key, json.loads(answer)["request_id"]))
        finally:
            if conn[0] is not None:
                await conn[0].aclose()

    t0 = time.perf_counter()
    async with trio.open_nursery() as n:
        for _ in range(level):
            n.start_soon(worker)
    return {"statuses": done, "wall": time.perf_counter() - t0, "errors": errors}
