"""A large asset to a slow client, through the node's own HTTP stack (Hypercorn with the
node's connection class, on trio's mock clock): served whole however long it takes while
the client keeps taking (Quart's 60 s bound on sending a response cut it mid-body)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import trio
from hypercorn.trio import serve
from PIL import Image

from service.config import Settings
from service.http.connection import MIN_RATE, install
from service.main import EndShielded, hypercorn_config
from test_assets import signed_url
from test_generation_support import local, upload_ok


def large_png() -> bytes:
    """About 17 MB: more than both ends' socket buffers hold, so the node's writes wait."""
    im = Image.frombytes("RGB", (2400, 2400), os.urandom(2400 * 2400 * 3))
    out = io.BytesIO()
    im.save(out, "PNG", compress_level=0)
    return out.getvalue()


async def test_a_large_file_to_a_slow_but_steady_client_is_served_whole(node, org, settling_clock):
    png = large_png()
    asset = await upload_ok(node, org["api_key"], png)
    path = local(await signed_url(node, org["api_key"], asset["id"]))
    install()
    config = hypercorn_config(Settings(data_dir=Path("unused"), host="127.0.0.1", port=0))
    step = 1024 * 1024  # taken every 10 s: far above MIN_RATE, far below the file's size a minute
    assert step / 10 > MIN_RATE and len(png) / step * 10 > 120
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(lambda task_status: serve(EndShielded(node.app), config, task_status=task_status,
                                                              shutdown_trigger=trio.sleep_forever))
        port = int(binds[0].rsplit(":", 1)[1])
        async with await trio.open_tcp_stream("127.0.0.1", port) as s:
            t0 = trio.current_time()
            await s.send_all(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            got, whole = b"", None
            while whole is None or len(got) < whole:
                await trio.sleep(10)
                taken = 0
                while taken < step and (whole is None or len(got) < whole):
                    data = await s.receive_some(step - taken)
                    assert data, f"the node closed the connection after {len(got)} bytes"
                    taken += len(data)
                    got += data
                    if whole is None and b"\r\n\r\n" in got:
                        head, _, _ = got.partition(b"\r\n\r\n")
                        assert head.startswith(b"HTTP/1.1 200"), head
                        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                                      if line.lower().startswith(b"content-length:"))
                        whole = len(head) + 4 + length
            assert got.partition(b"\r\n\r\n")[2] == png
            assert trio.current_time() - t0 > 120  # twice Quart's bound
        nursery.cancel_scope.cancel()
