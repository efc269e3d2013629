"""Sender against the fault server: outcome classes, time limits, TLS, SSRF guard."""

from __future__ import annotations

import os
import socket as stdlib_socket

import pytest
import trio
import trio.testing

from faultserver import HUGE_SIZE, canary, fault_server
from service.net.client import Outcome, Sender

TIMEOUT = 1.0
EDGE = 0.01  # the frozen clock is moved to this far before the limit, then this far past it
STUCK = 30  # real seconds with nothing to do before a frozen clock jumps: only a stuck post idles so long


@pytest.fixture
async def fs(nursery):
    async with fault_server(nursery) as server:
        yield server


@pytest.fixture
async def can(nursery):
    async with canary(nursery) as c:
        yield c


@pytest.fixture
def ca_file(fs, tmp_path):
    return fs.write_ca(tmp_path / "ca.pem")


@pytest.fixture
async def sender(ca_file):
    s = Sender(allow_private=True, ca_file=ca_file)
    yield s
    await s.aclose()


# A Sender holds no per-run state, so these two are shared by the many
# vector tests (building an SSL context costs ~20-40 ms each time).
@pytest.fixture(scope="module")
def guarded():
    return Sender(allow_private=False, ca_file=None)


@pytest.fixture(scope="module")
def open_sender():
    """allow_private on, no extra CA: for tests that need no fault server."""
    return Sender(allow_private=True, ca_file=None)


async def timed_post(sender: Sender, url: str, timeout: float = TIMEOUT, body=b"{}", headers=None):
    started = trio.current_time()
    outcome = await sender.post(url, body, headers or {}, timeout=timeout)
    return outcome, trio.current_time() - started


async def frozen_post(clock, sender: Sender, url: str, *, held=None, timeout: float = TIMEOUT):
    """POST with the mock clock frozen, so only the limit can end a wait and no machine is too
    slow for it. With `held` (returns once the post is where it waits), the clock is then moved
    to just before the limit, where the post must still be waiting, and just past it.
    Returns (outcome, mock seconds until the outcome)."""
    clock.rate = 0
    clock.autojump_threshold = STUCK  # a post stuck on the frozen clock fails late rather than hangs
    start = trio.current_time()
    result: list = []

    async def post():
        outcome = await sender.post(url, b"{}", {}, timeout=timeout)
        result.extend([outcome, trio.current_time() - start])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(post)
        if held is not None:
            with trio.fail_after(timeout / 2):  # on the frozen clock: only if it never gets there (STUCK)
                await held()
            clock.jump(timeout - EDGE)
            await trio.testing.wait_all_tasks_blocked()
            assert result == [], "ended before its limit"
            clock.jump(2 * EDGE)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()  # a post still waiting past its limit leaves `result` empty
    assert result, "still waiting past its limit"
    outcome, elapsed = result
    assert outcome.duration_ms == round(elapsed * 1000)
    return outcome, elapsed


class Resolver(trio.abc.HostnameResolver):
    """Injected DNS: each name maps to a list of answers, one list per lookup."""

    def __init__(self, answers: dict[str, list[list[str]]]):
        self.answers = answers
        self.lookups: list[str] = []

    async def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):
        name = host.decode() if isinstance(host, bytes) else host
        self.lookups.append(name)
        rounds = self.answers.get(name)
        if not rounds:
            raise stdlib_socket.gaierror(stdlib_socket.EAI_NONAME, "unknown name")
        addresses = rounds.pop(0) if len(rounds) > 1 else rounds[0]
        result = []
        for address in addresses:
            if ":" in address:
                result.append((stdlib_socket.AF_INET6, stdlib_socket.SOCK_STREAM, 6, "", (address, int(port), 0, 0)))
            else:
                result.append((stdlib_socket.AF_INET, stdlib_socket.SOCK_STREAM, 6, "", (address, int(port))))
        return result

    async def getnameinfo(self, sockaddr, flags):
        raise NotImplementedError


class SocketSpy(trio.abc.SocketFactory):
    """Records the target of every connect call.

    With `redirect_to`, every connect goes to that loopback address instead,
    so tests can prove which address was chosen without touching the network.
    """

    def __init__(self, redirect_to: tuple[str, int] | None = None):
        self.redirect_to = redirect_to
        self.connects: list[tuple] = []

    def socket(self, family=stdlib_socket.AF_INET, type=stdlib_socket.SOCK_STREAM, proto=0):
        if self.redirect_to is not None:
            family = stdlib_socket.AF_INET
        sock = trio.socket.from_stdlib_socket(stdlib_socket.socket(family, type, proto))
        real_connect = sock.connect

        async def connect(address):
            self.connects.append(tuple(address[:2]))
            await real_connect(self.redirect_to or address)

        sock.connect = connect
        return sock


@pytest.fixture
async def spy():
    spy = SocketSpy()
    trio.socket.set_custom_socket_factory(spy)
    yield spy
    trio.socket.set_custom_socket_factory(None)


# --- plain behaviour --------------------------------------------------------

async def test_ok_sends_body_and_headers_as_given(fs, sender):
    body = '{"event":"webhook.test","data":{"x":"é"}}'.encode()
    outcome, _ = await timed_post(
        sender, fs.https_url("/ok"), body=body, headers={"Content-Type": "application/json", "X-Service-Signature": "sha256=ab"}
    )
    assert outcome == Outcome(True, 200, None, None, outcome.duration_ms)
    [seen] = fs.requests
    assert (seen.method, seen.target, seen.body) == ("POST", "/ok", body)
    assert seen.header("Host") == f"127.0.0.1:{fs.ports['https']}"
    assert seen.header("Content-Type") == "application/json"
    assert seen.header("X-Service-Signature") == "sha256=ab"
    assert seen.header("Content-Length") == str(len(body))
    assert seen.header("User-Agent") == "genservice"


async def test_custom_user_agent(fs, ca_file):
    s = Sender(allow_private=True, ca_file=ca_file, user_agent="genservice-hooks/1")
    first, _ = await timed_post(s, fs.http_url("/ok"))
    second, _ = await timed_post(s, fs.http_url("/ok"), headers={"user-agent": "caller/2"})
    await s.aclose()
    assert first.is_delivered and second.is_delivered
    assert [[v for k, v in r.headers if k.lower() == "user-agent"] for r in fs.requests] == [
        ["genservice-hooks/1"], ["caller/2"]
    ]


# (path, delivered, status, error_class, error text, waits the whole timeout)
FAULTS = [
    ("/status/500", False, 500, "non_2xx", "500 Internal Server Error", False),
    ("/status/404", False, 404, "non_2xx", "404 Not Found", False),
    ("/status/599", False, 599, "non_2xx", "599 Unknown Status", False),
    ("/status/204", True, 204, None, None, False),
    ("/status/202", True, 202, None, None, False),
    ("/redirect?to=/ok", False, 302, "non_2xx", "302 Found", False),
    ("/hang", False, None, "timeout", "timed out after 1 s", True),
    ("/slow-headers", False, None, "timeout", "timed out after 1 s", True),
    ("/drip", True, 200, None, None, True),  # status arrived; body drips until the limit
    ("/reset", False, None, "connection", "connection reset", False),
    ("/close-early", False, None, "connection", "server closed the connection without a response", False),
    ("/garbage", False, None, "connection", "invalid HTTP response", False),
    ("/http10", True, 200, None, None, False),
]


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("path, delivered, status, error_class, error, waits", FAULTS, ids=[f[0] for f in FAULTS])
async def test_fault_paths(fs, sender, mock_clock, scheme, path, delivered, status, error_class, error, waits):
    url = fs.http_url(path) if scheme == "http" else fs.https_url(path)
    held = (lambda: fs.wait_for(1, path)) if waits else None
    outcome, elapsed = await frozen_post(mock_clock, sender, url, held=held)
    assert (outcome.is_delivered, outcome.status_code, outcome.error_class, outcome.error) == (
        delivered, status, error_class, error
    )
    if waits:  # still waiting just before the limit, ended just past it: ended by the limit
        assert elapsed == pytest.approx(TIMEOUT + EDGE)
    else:  # ended with the clock standing still: no limit (nor any other timer) was waited for
        assert elapsed == 0
    assert len(fs.seen(path.split("?")[0])) == 1


async def test_connection_refused(sender, mock_clock):
    with trio.socket.socket() as sock:  # a port nobody listens on
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        outcome, elapsed = await frozen_post(mock_clock, sender, f"http://127.0.0.1:{port}/")
    assert (outcome.status_code, outcome.error_class, outcome.error) == (None, "connection", "connection refused")
    assert elapsed == 0  # answered with the clock frozen: the limit played no part


async def test_unknown_host_is_a_connection_error(sender):
    trio.socket.set_custom_hostname_resolver(Resolver({}))
    outcome, _ = await timed_post(sender, "https://nowhere.example/hook")
    assert (outcome.error_class, outcome.error) == ("connection", "could not resolve host")


async def test_hanging_dns_is_bounded_by_the_timeout(sender, mock_clock):
    asked = trio.Event()

    class Stuck(Resolver):
        async def getaddrinfo(self, *args, **kwargs):
            asked.set()
            await trio.sleep_forever()

    trio.socket.set_custom_hostname_resolver(Stuck({}))
    outcome, elapsed = await frozen_post(mock_clock, sender, "https://slow-dns.example/hook", held=asked.wait)
    assert (outcome.error_class, outcome.error) == ("timeout", "timed out after 1 s")
    assert elapsed == pytest.approx(TIMEOUT + EDGE)  # waiting just before the limit, ended just past it


async def test_caller_cannot_break_message_framing(fs, sender):
    headers = {"content-length": "999", "Transfer-Encoding": "chunked", "X-Ok": "1"}
    outcome, _ = await timed_post(sender, fs.http_url("/ok"), body=b"12345", headers=headers)
    assert outcome.is_delivered, outcome
    [seen] = fs.requests
    assert seen.body == b"12345"
    assert [v for k, v in seen.headers if k.lower() == "content-length"] == ["5"]
    assert seen.header("Transfer-Encoding") is None
    assert seen.header("X-Ok") == "1"


@pytest.mark.parametrize("path", ["/huge", "/chunked-forever"])
async def test_big_2xx_body_is_capped_and_dropped(fs, sender, mock_clock, path):
    outcome, elapsed = await frozen_post(mock_clock, sender, fs.https_url(path), timeout=5.0)
    assert (outcome.is_delivered, outcome.status_code) == (True, 200)
    assert elapsed == 0  # returned at the cap with the clock frozen, not at the limit
    [seen] = fs.seen(path)
    with trio.fail_after(2):
        await seen.finished.wait()  # the server noticed we hung up
    assert seen.bytes_sent < 16 * 1024 * 1024 < HUGE_SIZE


async def test_redirect_is_not_followed(fs, sender, can):
    target = f"http://127.0.0.1:{can.port}/internal"
    outcome, _ = await timed_post(sender, fs.https_url(f"/redirect?to={target}"))
    assert (outcome.status_code, outcome.error_class) == (302, "non_2xx")
    assert can.connections == 0
    await timed_post(sender, target)  # positive control: the target is reachable
    assert can.connections == 1


async def test_cookies_are_not_kept(fs, sender):
    first, _ = await timed_post(sender, fs.http_url("/cookie"))
    second, _ = await timed_post(sender, fs.http_url("/cookie"))
    assert first.is_delivered and second.is_delivered
    assert [r.header("Cookie") for r in fs.requests] == [None, None]


async def test_environment_proxies_are_ignored(fs, sender, can, monkeypatch):
    proxy = f"http://127.0.0.1:{can.port}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    outcome, _ = await timed_post(sender, fs.http_url("/ok"))
    assert outcome.is_delivered
    assert can.connections == 0


# --- time limit -------------------------------------------------------------

async def test_default_timeout_is_10_seconds(fs, sender, mock_clock):
    """Virtual clock: real speed while connecting, then frozen and moved by hand."""
    result: list[Outcome] = []

    async def post():
        result.append(await sender.post(fs.https_url("/hang"), b"{}", {}))

    mock_clock.rate = 1.0
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(post)
        with trio.fail_after(5):
            await fs.wait_for(1, "/hang")
        mock_clock.rate = 0.0
        mock_clock.jump(start + 9.9 - trio.current_time())
        await trio.testing.wait_all_tasks_blocked()
        assert result == []
        mock_clock.jump(0.2)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()  # a post still waiting leaves `result` empty
    [outcome] = result
    assert (outcome.error_class, outcome.error) == ("timeout", "timed out after 10 s")
    assert 10000 <= outcome.duration_ms <= 10100


async def test_outer_cancellation_is_not_swallowed(fs, sender):
    with trio.move_on_after(0.3) as scope:
        await sender.post(fs.https_url("/hang"), b"{}", {}, timeout=5)
        pytest.fail("post returned although its caller was cancelled")
    assert scope.cancelled_caught


async def test_hanging_receivers_do_not_delay_a_healthy_one(fs, sender, mock_clock):
    """Frozen mock clock: the hanging posts can only end when it is moved past their limit."""
    mock_clock.autojump_threshold = STUCK  # a post stuck on the frozen clock fails late rather than hangs
    fds_before = len(os.listdir("/proc/self/fd"))
    hang_timeout = 2.0
    hung: list[tuple[Outcome, float]] = []

    async def hang():
        hung.append(await timed_post(sender, fs.https_url("/hang"), timeout=hang_timeout))

    async with trio.open_nursery() as nursery:
        for _ in range(100):
            nursery.start_soon(hang)
        with trio.fail_after(hang_timeout / 2):  # on the frozen clock: only if they never get there
            await fs.wait_for(100, "/hang")  # all 100 are connected and parked
        outcome, elapsed = await timed_post(sender, fs.https_url("/ok"), timeout=hang_timeout)
        assert outcome.is_delivered
        assert elapsed == 0  # nothing in it waited on the clock
        assert hung == []  # the healthy post finished while all 100 still hung
        mock_clock.jump(hang_timeout - EDGE)
        await trio.testing.wait_all_tasks_blocked()
        assert hung == []
        mock_clock.jump(2 * EDGE)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()  # a post still waiting past its limit is missing from `hung`
    assert len(hung) == 100
    assert {o.error_class for o, _ in hung} == {"timeout"}
    assert [t for _, t in hung] == [pytest.approx(hang_timeout + EDGE)] * 100  # each ended by its limit
    with trio.fail_after(2):  # the server sees every client hang up ...
        for seen in fs.seen("/hang"):
            await seen.finished.wait()
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 2  # ... and no socket is left open


# --- TLS --------------------------------------------------------------------

async def test_tls_needs_the_ca_file(fs):
    without = Sender(allow_private=True, ca_file=None)
    outcome, _ = await timed_post(without, fs.https_url("/ok"))
    await without.aclose()
    assert (outcome.status_code, outcome.error_class) == (None, "tls")
    assert outcome.error.startswith("TLS certificate verify failed")
    assert fs.requests == []


async def test_certificate_for_another_host_fails(fs, sender):
    outcome, _ = await timed_post(sender, fs.wrong_host_url("/ok"))
    assert outcome.error_class == "tls"
    assert outcome.error.startswith("TLS certificate verify failed")
    assert fs.requests == []


async def test_untrusted_certificate_fails(fs, sender):
    outcome, _ = await timed_post(sender, fs.untrusted_url("/ok"))
    assert outcome.error_class == "tls"
    assert outcome.error.startswith("TLS certificate verify failed")
    assert fs.requests == []


async def test_plain_http_to_a_tls_port_is_a_connection_error(fs, sender, mock_clock):
    """Frozen mock clock, moved past the limit once the post waits: it has ended by then."""
    mock_clock.autojump_threshold = STUCK  # a post stuck on the frozen clock fails late rather than hangs
    result = []

    async def post():
        result.append(await timed_post(sender, fs.url("https", "/ok").replace("https://", "http://")))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(post)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(TIMEOUT + EDGE)
        await trio.testing.wait_all_tasks_blocked()
        ended = list(result)
        nursery.cancel_scope.cancel()
    [(outcome, elapsed)] = ended
    assert outcome.status_code is None
    assert outcome.error_class in ("connection", "timeout")
    assert elapsed <= TIMEOUT + EDGE


async def test_tls_verifies_and_sends_the_url_host_name_while_connecting_to_the_ip(fs, sender):
    resolver = Resolver({"wrong.example": [["127.0.0.1"]]})
    trio.socket.set_custom_hostname_resolver(resolver)
    port = fs.ports["wrong_host"]
    outcome, _ = await timed_post(sender, f"https://wrong.example:{port}/ok")
    assert outcome.is_delivered, outcome
    assert ("wrong_host", "wrong.example") in fs.sni
    assert fs.requests[0].header("Host") == f"wrong.example:{port}"
    assert resolver.lookups == ["wrong.example"]


# --- SSRF guard -------------------------------------------------------------

SSRF_HOSTS = [
    "127.0.0.1", "127.1", "2130706433", "0x7f000001", "0x7f.1", "0177.0.0.1",
    "localhost", "0.0.0.0", "0", "10.0.0.1", "172.16.0.1", "192.168.1.1",
    "100.64.0.1", "169.254.169.254", "169.254.170.2", "192.0.0.170", "192.0.2.1",
    "198.18.0.1", "198.51.100.1", "203.0.113.1", "224.0.0.1", "239.255.255.250",
    "240.0.0.1", "255.255.255.255", "[::]", "[::1]", "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]", "[::ffff:169.254.169.254]", "[::127.0.0.1]",
    "[64:ff9b::7f00:1]", "[64:ff9b:1::a00:1]", "[2002:7f00:1::1]",
    "[2002:a9fe:a9fe::1]", "[fd00:ec2::254]", "[fc00::1]", "[fe80::1]",
    "[fe80::1%25lo]", "[ff02::1]", "[2001:db8::1]", "[100::1]",
]
UNPARSEABLE = {"0177.0.0.1", "[fe80::1%25lo]"}  # refused as invalid_url
LOOPBACK = ["127.0.0.1", "127.1", "2130706433", "0x7f000001", "0x7f.1", "localhost",
            "0.0.0.0", "0", "[::]", "[::1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]"]


@pytest.mark.parametrize("host", SSRF_HOSTS)
@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_ssrf_vector_refused_without_a_connection(guarded, can, spy, host, scheme):
    outcome, _ = await timed_post(guarded, f"{scheme}://{host}:{can.port}/hook")
    expected = "invalid_url" if host in UNPARSEABLE else "blocked_address"
    assert (outcome.is_delivered, outcome.status_code, outcome.error_class) == (False, None, expected)
    if expected == "blocked_address":
        assert outcome.error == "address not allowed"
    assert spy.connects == []
    assert can.connections == 0


@pytest.mark.parametrize("host", [h for h in SSRF_HOSTS if h not in UNPARSEABLE])
async def test_ssrf_vector_connects_when_private_is_allowed(open_sender, can, host):
    """Positive control: with the switch on, each vector gets exactly one connection.

    Every connect is redirected to the canary, so non-loopback vectors never
    leave the machine.
    """
    spy = SocketSpy(redirect_to=("127.0.0.1", can.port))
    trio.socket.set_custom_socket_factory(spy)
    outcome, _ = await timed_post(open_sender, f"http://{host}:{can.port}/hook")
    assert outcome.error_class in ("connection", "timeout")  # the canary just hangs up
    assert len(spy.connects) == 1
    assert can.connections == 1


@pytest.mark.parametrize("host", LOOPBACK)
async def test_loopback_vector_really_reaches_the_canary_when_allowed(open_sender, can, host):
    if ":" in host and not can.has_ipv6:
        pytest.skip("no IPv6 loopback")
    await timed_post(open_sender, f"http://{host}:{can.port}/hook")
    assert can.connections == 1


async def test_mixed_answer_connects_only_to_the_public_address(fs, guarded):
    resolver = Resolver({"mixed.example": [["127.0.0.1", "10.0.0.7", "93.184.216.34", "fd00::1"]]})
    trio.socket.set_custom_hostname_resolver(resolver)
    port = fs.ports["http"]
    spy = SocketSpy(redirect_to=("127.0.0.1", port))  # "the internet" is the fault server
    trio.socket.set_custom_socket_factory(spy)
    outcome, _ = await timed_post(guarded, f"http://mixed.example:{port}/ok")
    assert outcome.is_delivered, outcome
    assert spy.connects == [("93.184.216.34", port)]
    assert fs.requests[0].header("Host") == f"mixed.example:{port}"


async def test_public_addresses_are_tried_in_order(fs, guarded):
    refused = trio.socket.socket()
    await refused.bind(("127.0.0.1", 0))  # bound, not listening: refuses connections

    class Split(SocketSpy):
        def __init__(self):
            super().__init__()
            self.redirects = {"1.1.1.1": ("127.0.0.1", refused.getsockname()[1]),
                              "8.8.8.8": ("127.0.0.1", fs.ports["http"])}

        def socket(self, family=stdlib_socket.AF_INET, type=stdlib_socket.SOCK_STREAM, proto=0):
            sock = trio.socket.from_stdlib_socket(stdlib_socket.socket(stdlib_socket.AF_INET, type, proto))
            real_connect = sock.connect

            async def connect(address):
                self.connects.append(tuple(address[:2]))
                await real_connect(self.redirects[address[0]])

            sock.connect = connect
            return sock

    spy = Split()
    trio.socket.set_custom_socket_factory(spy)
    trio.socket.set_custom_hostname_resolver(Resolver({"two.example": [["1.1.1.1", "10.0.0.1", "8.8.8.8"]]}))
    port = fs.ports["http"]
    outcome, _ = await timed_post(guarded, f"http://two.example:{port}/ok")
    refused.close()
    assert outcome.is_delivered, outcome
    assert spy.connects == [("1.1.1.1", port), ("8.8.8.8", port)]


async def test_all_private_answer_is_blocked(guarded, spy):
    trio.socket.set_custom_hostname_resolver(Resolver({"inside.example": [["10.0.0.1", "::1", "169.254.169.254"]]}))
    outcome, _ = await timed_post(guarded, "https://inside.example/hook")
    assert outcome.error_class == "blocked_address"
    assert spy.connects == []


async def test_rebinding_name_is_checked_on_every_attempt(fs, guarded):
    resolver = Resolver({"rebind.example": [["93.184.216.34"], ["127.0.0.1"]]})
    trio.socket.set_custom_hostname_resolver(resolver)
    port = fs.ports["http"]
    spy = SocketSpy(redirect_to=("127.0.0.1", port))
    trio.socket.set_custom_socket_factory(spy)
    first, _ = await timed_post(guarded, f"http://rebind.example:{port}/ok")
    second, _ = await timed_post(guarded, f"http://rebind.example:{port}/ok")
    assert first.is_delivered
    assert second.error_class == "blocked_address"
    assert spy.connects == [("93.184.216.34", port)]
    assert resolver.lookups == ["rebind.example", "rebind.example"]


# --- bad input --------------------------------------------------------------

@pytest.mark.parametrize(
    "url",
    ["", "not a url", "/relative/path", "ftp://example.com/", "mailto:a@example.com",
     "http://", "http:///path", "https://example.com:99999/", "https://example.com:0/",
     "http://exa mple.com/", "http://[::1/", "https://ex%41mple.com/"],
)
async def test_invalid_url(sender, spy, url):
    outcome, _ = await timed_post(sender, url)
    assert (outcome.is_delivered, outcome.status_code, outcome.error_class) == (False, None, "invalid_url")
    assert spy.connects == []


async def test_closed_sender_refuses_to_post(sender):
    await sender.aclose()
    with pytest.raises(RuntimeError):
        await sender.post("https://example.com/", b"", {})


async def test_refused_and_unresolvable_destinations_get_one_answer(guarded):
    """With private addresses refused, a name that does not resolve answers exactly like a
    name that resolves to a refused address, so the answer tells nothing about which
    internal names exist."""
    trio.socket.set_custom_hostname_resolver(Resolver({"db.internal": [["10.0.0.5"]],
                                                       "localhost.internal": [["127.0.0.1"]]}))
    answers = set()
    for host in ("db.internal", "localhost.internal", "nowhere.internal", "10.0.0.5", "[::1]"):
        outcome, _ = await timed_post(guarded, f"https://{host}/hook")
        answers.add((outcome.is_delivered, outcome.status_code, outcome.error_class, outcome.error))
    assert answers == {(False, None, "blocked_address", "address not allowed")}
