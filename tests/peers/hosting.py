"""Serve a peer's Quart-trio app on a loopback port inside a trio test (or a bench)."""

from __future__ import annotations

import hashlib
from contextlib import asynccontextmanager
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from PIL import Image, ImageDraw


def require_token(app, peer, expected: str, open_prefix: str, refuse) -> None:
    """Refuse every request but those under `open_prefix` (output files) whose Authorization
    header is not `expected`, with `refuse()` (the hosted API's own 401); every header given
    is kept in `peer.auth_seen` for the tests on secrets."""
    from quart import request

    @app.before_request
    async def auth():
        if request.path.startswith(open_prefix):
            return None
        given = request.headers.get("Authorization", "")
        peer.auth_seen.append(given)
        return None if given == expected else refuse()


@asynccontextmanager
async def serving(app, host: str = "127.0.0.1", port: int = 0):
    """Yields the base URL (`http://127.0.0.1:PORT`) while the app is served."""
    cfg = Config()
    cfg.bind = [f"{host}:{port}"]
    cfg.accesslog = None
    cfg.errorlog = None
    async with trio.open_nursery() as n:
        urls = await n.start(partial(serve, app, cfg, shutdown_trigger=trio.sleep_forever))
        try:
            yield urls[0]
        finally:
            n.cancel_scope.cancel()


@asynccontextmanager
async def running(peer, app):
    """Serve a peer object's app; the peer gets `url` and a `nursery` for its own tasks."""
    async with trio.open_nursery() as n:
        peer.nursery = n
        async with serving(app) as url:
            peer.url = url
            yield peer
        n.cancel_scope.cancel()


@asynccontextmanager
async def serve_peer(peer_class, create_app, *args):
    """`peer_class(*args)` served by `create_app(peer)`: a peer module's `run_peer` is this
    with its own two, `partial(serve_peer, Peer, create_app)`."""
    peer = peer_class(*args)
    async with running(peer, create_app(peer)):
        yield peer


def picture(prompt: str, seed: int, width: int = 64, height: int = 64) -> bytes:
    """The peers' "model": a PNG whose colours come from sha256("<seed>:<prompt>")."""
    from io import BytesIO

    digest = hashlib.sha256(f"{seed}:{prompt}".encode()).digest()
    image = Image.new("RGB", (width, height), tuple(digest[:3]))
    ImageDraw.Draw(image).ellipse((width // 4, height // 4, 3 * width // 4, 3 * height // 4), fill=tuple(digest[3:6]))
    buf = BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()
