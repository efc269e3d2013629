"""The instant Cog server alone, driven the way the node drives it: the engine's own bound.

64 workers, each on its own keep-alive connection, create a prediction with
`PUT /predictions/{id}`, `Prefer: respond-async` and a `completed` webhook (as
service/engines/cog.py does for a server of several slots), wait for that webhook, and
create the next; a `409 At capacity` is sent again after 50 ms, as the node does
(`cog_alone_busy` counts them). The webhooks go to a bare trio server in this process
that answers 200 at once. No node: whatever bounds this is Cog and the machine. Raw
sockets keep this process's share of the 2 cores small (the node is not running
meanwhile).

`jobs_per_s_instant_64` (bench/engines.py) over this figure reads how close the node comes
to the engine it fronts, as `vs_raw_64` does for holds against SQLite.
"""

from __future__ import annotations

import json
import time
import uuid

import trio

from loadgen import read_message, read_response

# Cog sends a prediction's `completed` webhook before it frees the prediction's slot, so a
# worker's next create can meet `409 At capacity` (more often the cheaper Cog's webhooks
# are: bench/instant_engine.py); the node waits 50 ms and sends it again (`BUSY_RETRY_S`)
BUSY_RETRY_S = 0.05


async def _receiver(listeners, done: dict[str, trio.Event]) -> None:
    async def handle(stream) -> None:
        buf = bytearray()
        async with stream:
            while True:
                try:
                    _head, body = await read_message(stream, buf)  # a webhook
                except (ConnectionError, trio.BrokenResourceError):
                    return
                await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                payload = json.loads(body)
                if payload.get("status") in ("succeeded", "failed", "canceled") and payload["id"] in done:
                    done.pop(payload["id"]).set()

    await trio.serve_listeners(handle, listeners)


async def predictions_per_s(cog_url: str, jobs: int, level: int = 64) -> dict:
    """`jobs` predictions, `level` in flight, after `level` of warm-up."""
    host, port = cog_url.removeprefix("http://").split(":")
    done: dict[str, trio.Event] = {}
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        hook = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/hook"
        nursery.start_soon(_receiver, listeners, done)
        errors: list[str] = []
        busy = [0]

        async def run(count: int) -> float:
            todo = [count]

            async def worker() -> None:
                stream, buf = await trio.open_tcp_stream(host, int(port)), bytearray()
                async with stream:
                    while todo[0] > 0:
                        todo[0] -= 1
                        pid = uuid.uuid4().hex
                        body = json.dumps({"id": pid, "input": {"prompt": "alone", "seed": 0}, "webhook": hook,
                                           "webhook_events_filter": ["completed"]}).encode()
                        ended = done[pid] = trio.Event()
                        while True:
                            await stream.send_all((f"PUT /predictions/{pid} HTTP/1.1\r\nHost: {host}\r\n"
                                                   f"Content-Type: application/json\r\nPrefer: respond-async\r\n"
                                                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
                            status, answer = await read_response(stream, buf)
                            if status != 409:
                                break
                            busy[0] += 1  # as the node does (service/engines/cog.py): wait, send again
                            await trio.sleep(BUSY_RETRY_S)
                        if status != 202:
                            errors.append(f"{status}: {answer[:200]!r}")
                            done.pop(pid, None)
                            continue
                        await ended.wait()

            t0 = time.perf_counter()
            async with trio.open_nursery() as workers:
                for _ in range(level):
                    workers.start_soon(worker)
            return time.perf_counter() - t0

        await run(level)
        wall = await run(jobs)
        nursery.cancel_scope.cancel()
    return {"cog_alone_per_s_64": round((jobs - len(errors)) / wall, 1), "cog_alone_errors": len(errors),
            "cog_alone_busy": busy[0]}
