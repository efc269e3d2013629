"""serve(): the nursery tree of a node, on one screen.

    storage (migrated first)
    └── actors nursery (writer, registries, the hook gate's child process when set; outlives HTTP)
        └── Hypercorn (trio worker)
Shutdown: HTTP drains first, then actors stop, then storage closes.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from service import crash
from service.clock import Clock
from service.config import Settings, SettingsError
from service.descriptors import quiet_accept_loop, raise_nofile
from service.hookgate.gate import HookGate, bind as bind_hook_gate
from service.http.app import create_app
from service.http.clientaddr import check_setting as check_trusted_proxies
from service.http.connection import install as install_connection
from service.local_node import ensure_operator_token, private_data_dir, write_url
from service.media import isolated
from service.node import build
from service.reload import reload_on_sighup
from service.replica import ReplicaError, ReplicaState, litestream_path, replicate
from service.storage.db import Store
from service.sealing import NodeKey, check_key_file
from service.storage.migrate import apply_all
from service.storage.sealed import seal_at_rest

log = logging.getLogger("service")


def check_settings(settings: Settings) -> None:
    """Start-up checks beyond parsing (service/config.py), each refusal one line
    (SettingsError): `genservice serve` stops before anything is opened."""
    try:
        check_trusted_proxies(settings.trusted_proxies)
    except ValueError as e:
        raise SettingsError(f"GENSERVICE_TRUSTED_PROXIES: {e}") from None
    if bool(settings.tls_cert) != bool(settings.tls_key):
        raise SettingsError("GENSERVICE_TLS_CERT and GENSERVICE_TLS_KEY go together: set both, or neither")
    for name in ("tls_cert", "tls_key", "webhook_ca_file", "smtp_ca_file"):
        path = getattr(settings, name)
        if path and not os.access(path, os.R_OK):
            raise SettingsError(f"GENSERVICE_{name.upper()}: no readable file at {path}")
    try:
        check_key_file(settings.node_key_path)
    except ValueError as e:
        raise SettingsError(f"GENSERVICE_NODE_KEY_FILE: {e}") from None
    if settings.replica_url:
        try:
            litestream_path()
        except ReplicaError as e:
            raise SettingsError(str(e)) from None


def first_steps(settings: Settings) -> list[str]:
    """What to do once the node listens: where to open it and the operator's first commands."""
    url = settings.public_base_url
    lines = [f"open {url}/ in a browser: sign up there (or log in); the API reference is {url}/docs",
             "approve a sign-up: genservice admin pending, then genservice admin approve-org ORG_ID; "
             "or make an organization at once: genservice admin create-org NAME OWNER_EMAIL"]
    if not settings.smtp_host:
        lines.append("no GENSERVICE_SMTP_HOST: mails (sign-up confirmation links) are written to this log")
    return lines


def prebind(settings: Settings) -> socket.socket | None:
    """Port 0: bind the listening socket before the node is built and put the bound port in
    the settings, so every URL the node keeps from its base URL (status and cancel URLs,
    asset content redirects, signed links, checkout pages) carries the real port."""
    if settings.port != 0 or settings.base_url:
        return None
    host = settings.host.strip("[]")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    settings.port = sock.getsockname()[1]
    return sock


class EndShielded:
    """ASGI wrapper: the last message of each HTTP response is sent shielded from
    cancellation.

    Hypercorn does its end-of-response work inside that send: it posts `http.disconnect` to
    the app and then, for a `Connection: close` answer, closes the socket. Quart-Trio cancels
    the request's tasks as soon as it reads that disconnect, which can land in the middle of
    Hypercorn's close. A 413 answered before its body was read then closed after 0 s, after
    5 s or never, and the server kept the socket (and tasks) after the client had gone
    (tests/test_hostile_input.py). Hypercorn shields its socket writes itself; this shields
    the rest of that one message (an empty end-of-body frame in practice).
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_end_shielded(message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                with trio.CancelScope(shield=True):
                    await send(message)
            else:
                await send(message)

        return await self.app(scope, receive, send_end_shielded)


async def _end_streams_at(shutdown: trio.Event, node) -> None:
    await shutdown.wait()
    node.streams.close()


def hypercorn_config(settings: Settings, sock: socket.socket | None = None) -> Config:
    cfg = Config()
    # a pre-bound socket is handed over by its descriptor (Hypercorn owns it from then on)
    cfg.bind = [f"fd://{sock.detach()}"] if sock is not None else [f"{settings.host}:{settings.port}"]
    cfg.accesslog = None
    cfg.errorlog = logging.getLogger("hypercorn.error")
    cfg.keep_alive_timeout = 5
    cfg.graceful_timeout = 10
    if settings.tls_cert or settings.tls_key:
        if not (settings.tls_cert and settings.tls_key):
            raise SystemExit("GENSERVICE_TLS_CERT and GENSERVICE_TLS_KEY go together: set both, or neither")
        cfg.certfile, cfg.keyfile = settings.tls_cert, settings.tls_key
    return cfg


# The cyclic collector's young generation is collected every 50,000 container allocations
# instead of Python's 700. With a thousand requests in flight, each young collection found
# most of their objects alive and moved them on, and the older collections that followed
# walked them all again: the collector took a third of the node's CPU at 1,000 status polls
# a second (bench/README.md, "Throughput V"). Garbage without cycles is freed at once
# either way; cyclic garbage now waits a little longer for its collection.
GC_THRESHOLD = (50_000, 10, 10)


async def serve(settings: Settings, *, shutdown: trio.Event | None = None, clock: Clock | None = None,
                task_status=trio.TASK_STATUS_IGNORED) -> None:
    # The database holds webhook signing secrets (kept to sign) and the asset-URL key: every
    # file the node creates is readable by its own user only.
    os.umask(0o077)
    private_data_dir(settings)
    settings.operator_token = ensure_operator_token(settings)
    crash.configure(settings.crashpoint, settings.test_mode)
    check_trusted_proxies(settings.trusted_proxies)  # a malformed entry stops the start
    # before the node is built: the streams' node-wide bound is read from the raised limit
    soft, hard = raise_nofile()
    quiet_accept_loop()
    install_connection()  # Hypercorn's connection without its per-request costs (service/http/connection.py)
    sock = prebind(settings)
    # before the node is built: the engines' hook URLs carry the gate's bound address
    gate_sock = bind_hook_gate(settings) if settings.engine_hooks_listen else None
    apply_all(settings.db_path)
    node_key = NodeKey(settings.node_key_path)
    sealed = seal_at_rest(settings.db_path, node_key)
    if sealed:
        log.info("sealed %d webhook secrets stored in clear by an earlier version", sealed)
    store = Store(settings.db_path)
    shutdown = trio.Event() if shutdown is None else shutdown
    try:
        async with isolated.workers(), trio.open_nursery() as actors:
            actors.start_soon(isolated.warm)  # the media check's first worker (a second's start)
            replica = ReplicaState()
            if settings.replica_url:  # cancelled with the actors, after the last write: stops last
                await actors.start(replicate, settings, store, replica)
            node = build(settings, store, clock or Clock(), node_key)
            if settings.replica_url:  # a replica that keeps failing shows in /metrics
                node.metrics.registry.register(replica)
            await node.start(actors)
            if gate_sock is not None:  # the engines' hooks, received by a process of its own
                await actors.start(HookGate.for_node(node, gate_sock).run)
                log.info("engine hooks: received by a gate process at %s", settings.engine_hooks_url)
            if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
                await actors.start(reload_on_sighup, node)  # SIGHUP: read the catalog file again
            app = create_app(node)
            # Everything built at start lives for the whole run: keep it out of the cyclic
            # collector's full passes (they paused the loop ~100 ms with many live actors).
            gc.collect()
            gc.freeze()
            gc.set_threshold(*GC_THRESHOLD)
            async with trio.open_nursery() as http:
                urls = await http.start(partial(hypercorn_serve, EndShielded(app), hypercorn_config(settings, sock),
                                                shutdown_trigger=shutdown.wait))
                if not settings.base_url:  # port 0: URLs the API returns follow the bound port
                    settings.base_url = urls[0]
                write_url(settings, settings.public_base_url)  # for `genservice admin` (service/local_node.py)
                log.info("genservice listening on %s", ", ".join(urls))
                log.info("file descriptors: limit %d (hard %d); event streams at most %d", soft, hard,
                         node.streams.limits.total)
                if settings.test_mode:
                    log.warning("TEST MODE: prompt directives, the test payment provider (top-ups paid "
                                "without money) and the test clock are on. Never run a real node like this.")
                for line in first_steps(settings):
                    log.info("%s", line)
                task_status.started(urls)
                # streams end when shutdown begins, so the HTTP drain does not wait for them
                http.start_soon(_end_streams_at, shutdown, node)
            await node.aclose()
            actors.cancel_scope.cancel()
    finally:
        if sock is not None and sock.fileno() != -1:  # never handed to Hypercorn
            sock.close()
        if gate_sock is not None:  # the gate closes it; a start that failed before it did not
            gate_sock.close()
        store.close()
