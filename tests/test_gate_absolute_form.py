"""A hook whose request line names the whole URL (absolute-form, RFC 9112 3.2.2: a server
must accept it), as some proxies forward it: the node's own port routes it by its path
(Quart), and so must the hook gate."""

from __future__ import annotations

import json

import trio

from engine_support import engine_node
from test_hook_gate import SENT, gate_url


async def answered(base: str, target: str, body: bytes) -> tuple[bytes, bytes]:
    host, port = base.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(f"POST {target} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {len(body)}\r\n"
                          "Connection: close\r\n\r\n".encode() + body)
    got = b""
    with trio.fail_after(10):
        while chunk := await stream.receive_some():
            got += chunk
    await stream.aclose()
    head, _, answer = got.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], answer


async def test_a_hook_sent_with_its_whole_url_is_delivered_through_the_gate(tmp_path):
    async with engine_node(tmp_path, "", engine_hooks_listen="127.0.0.1:0") as n:
        ctx = n.parts.engines.context
        hooks = ctx.expect_hooks("job-1")
        try:
            url = gate_url(n, "job-1")
            assert await answered(n.parts.settings.engine_hooks_url, url, json.dumps(SENT).encode()) == (
                b"HTTP/1.1 200 ", b'{"received":true}\n')
            assert hooks.receive_nowait() == SENT
        finally:
            ctx.forget_hooks("job-1")
            await hooks.aclose()
