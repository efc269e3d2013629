"""Webhook DNS lookups run in threads of their own (service/net/backend.py, `DNS_THREADS`):
lookups that hang in the system resolver hold at most that many threads and none of trio's
default limiter, which the node's file work and uploads share."""

from __future__ import annotations

import socket
import threading

import trio
from waiting import wait_until

from service.net import backend
from service.net.client import Sender


async def test_hanging_lookups_leave_the_default_thread_limiter_alone(autojump_clock, monkeypatch, tmp_path):
    real = socket.getaddrinfo
    release = threading.Event()
    asked: list[str] = []  # names whose lookup reached the (fake) system resolver

    def blocking(host, port, family=0, type=0, proto=0, flags=0):
        if flags & socket.AI_NUMERICHOST:  # the no-thread try for IP literals
            return real(host, port, family, type, proto, flags)
        asked.append(host)
        release.wait()  # a resolver that only gives up when the test ends
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", blocking)
    default = trio.to_thread.current_default_thread_limiter()
    lookups = default.total_tokens + backend.DNS_THREADS  # more than the default limiter holds
    sender = Sender(allow_private=False, ca_file=None)
    outcomes = []

    async def post(i: int) -> None:
        outcomes.append(await sender.post(f"https://slow-{i}.example/hook", b"{}", {}, timeout=10.0))

    try:
        async with trio.open_nursery() as nursery:
            for i in range(lookups):
                nursery.start_soon(post, i)
            await trio.testing.wait_all_tasks_blocked()
            assert default.borrowed_tokens == 0
            assert backend.dns_limiter().borrowed_tokens == backend.DNS_THREADS
        # every post gave up at its limit (the mock clock jumped); the abandoned lookups still
        # hold their threads, all of them the lookups' own
        assert {(o.error_class, o.error, o.status_code) for o in outcomes} == {("timeout", "timed out after 10 s", None)}
        assert len(outcomes) == lookups
        assert default.borrowed_tokens == 0
        assert backend.dns_limiter().borrowed_tokens == backend.DNS_THREADS
        # the node's file work still gets a thread at once
        with trio.fail_after(1):
            await trio.Path(tmp_path / "upload.bin").write_bytes(b"x" * 1024)
        assert (tmp_path / "upload.bin").stat().st_size == 1024
        await wait_until(lambda: len(asked) == backend.DNS_THREADS, 10, real_time=True)
    finally:
        release.set()
    await wait_until(lambda: backend.dns_limiter().borrowed_tokens == 0, 10, real_time=True)
    assert len(asked) == backend.DNS_THREADS  # the posts that waited for a thread never reached the resolver
    assert default.borrowed_tokens == 0


async def test_ip_literals_and_custom_resolvers_take_no_thread(monkeypatch):
    def no_system_lookup(*args, **kwargs):
        raise AssertionError("system resolver asked")

    infos = await backend.getaddrinfo("93.184.216.34", 443)
    assert [i[4] for i in infos] == [("93.184.216.34", 443)]
    monkeypatch.setattr(trio.to_thread, "run_sync", no_system_lookup)

    class Names(trio.abc.HostnameResolver):
        async def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("203.0.113.7", port))]

        async def getnameinfo(self, sockaddr, flags):
            raise NotImplementedError

    trio.socket.set_custom_hostname_resolver(Names())
    try:
        assert [i[4] for i in await backend.getaddrinfo("hook.example", 443)] == [("203.0.113.7", 443)]
    finally:
        trio.socket.set_custom_hostname_resolver(None)
    assert backend.dns_limiter().borrowed_tokens == 0
