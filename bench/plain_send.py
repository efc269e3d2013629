"""The engine client's plain send (service/engines/transport.py `send_plain`) against the
same request through httpx's own request and response layers, in alternating rounds.

A Cog job's create, `PUT /predictions/{id}` with a small JSON body and `Prefer:
respond-async`, sent one at a time on one keep-alive connection to a bare trio server in
this process that answers `202` at once. Prints the thread's CPU a call (the server's share
included, the same in both) for each round and the ratio of the medians.

    .venv/bin/python bench/plain_send.py [--calls 3000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from keepalive_server import Server

from service.engines.transport import engine_client, send_plain

ANSWER = b'HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: 22\r\n\r\n{"status":"starting"}\n'


async def main(calls: int, rounds: int) -> None:
    async with trio.open_nursery() as nursery:
        server = Server(ANSWER)
        await server.serve(nursery)
        url = f"http://127.0.0.1:{server.port}/predictions/job-0001"
        body = {"id": "job-0001", "input": {"prompt": "a lighthouse", "seed": 7},
                "webhook": "http://127.0.0.1:1/engine-hooks/job-0001/t", "webhook_events_filter": ["completed"]}
        headers = {"Prefer": "respond-async"}
        async with engine_client() as client:

            async def layered() -> httpx.Response:
                request = httpx.Request("PUT", url, json=body, headers=headers,
                                        extensions={"timeout": httpx.Timeout(30.0).as_dict()})
                response = await client._transport_for_url(request.url).handle_async_request(request)
                try:
                    await response.aread()
                finally:
                    await response.aclose()
                return response

            async def plain() -> httpx.Response:
                return await send_plain(client, "PUT", url, json=body, headers=headers, timeout=30.0)

            figures: dict[str, list[float]] = {"httpx_layers": [], "plain": []}
            for r in range(rounds):
                order = ("httpx_layers", "plain") if r % 2 == 0 else ("plain", "httpx_layers")
                for name in order:
                    send = layered if name == "httpx_layers" else plain
                    for _ in range(100):  # warm
                        await send()
                    t0 = time.thread_time()
                    for _ in range(calls):
                        assert (await send()).status_code == 202
                    figures[name].append((time.thread_time() - t0) / calls * 1e6)
                print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f} us a call" for k, v in figures.items()))
        nursery.cancel_scope.cancel()
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(json.dumps({"us_per_call_httpx_layers": round(med["httpx_layers"], 1), "us_per_call_plain": round(med["plain"], 1),
                      "plain_vs_layers": round(med["plain"] / med["httpx_layers"], 3), "calls": calls, "rounds": rounds}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    trio.run(main, args.calls, args.rounds)
