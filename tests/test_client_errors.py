"""`genservice-client` and the client package when the node (or whatever answers at its
address) misbehaves: every failure a one-line message and an exit status, never a traceback
or the key; a job's stream of keep-alives that never ends still ends at the caller's
timeout; an answer without end is not read without bound. In process, on httpx's
MockTransport: no node, no sleeps (a fake clock for the sync client, trio's for the async)."""

from __future__ import annotations

import genservice_client as gc
import httpx
import pytest
import trio
import trio.testing
from genservice_client import cli
from genservice_client import client as client_mod

KEY = "aak_0123456789secret"
URL = "http://node.test"


def run_cli(monkeypatch, capsys, handler, argv: list[str], env: dict | None = None) -> tuple[int, str, str]:
    """`main(argv)` with the package's client on `handler` (no retries: they would sleep)."""
    monkeypatch.setenv("HOME", "/nonexistent")
    for name, value in {"GENSERVICE_API_KEY": KEY, "GENSERVICE_URL": URL, **(env or {})}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(cli, "Client", lambda key, url: gc.Client(
        key, url, max_retries=0, http=httpx.Client(base_url=url, transport=httpx.MockTransport(handler))))
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def test_a_network_error_is_a_message(monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, refused, ["balance"])
    assert (code, out, err) == (1, "", ("genservice-client: could not reach http://node.test: "
                                        "[Errno 111] Connection refused\n"))


def test_the_key_is_never_printed(monkeypatch, capsys):
    def illegal(request: httpx.Request) -> httpx.Response:  # h11's words for a key with a stray newline
        raise httpx.LocalProtocolError(f"Illegal header value b'Bearer {KEY}\\n'", request=request)

    code, _, err = run_cli(monkeypatch, capsys, illegal, ["balance"])
    assert (code, err) == (1, ("genservice-client: could not reach http://node.test: "
                               "Illegal header value b'Bearer ***\\n'\n"))


def test_an_answer_that_is_not_json_is_a_message(monkeypatch, capsys):
    def portal(request: httpx.Request) -> httpx.Response:  # a captive portal, a proxy's page
        return httpx.Response(200, text="<html>Sign in</html>", headers={"Content-Type": "text/html"})

    code, _, err = run_cli(monkeypatch, capsys, portal, ["balance"])
    assert (code, err) == (1, ("genservice-client: 200 response.not_json: The answer is not JSON "
                               "(text/html): is the URL the node's address?\n"))


@pytest.mark.parametrize("status, body, message", [
    (401, {"status": False, "error": "Unauthorized"}, "401 auth.unauthorized: Unauthorized"),
    (429, {"error": {"code": "request.rate_limited", "message": "Too many requests."}},
     "429 request.rate_limited: Too many requests."),
    (502, None, "502 request.error: Bad Gateway"),
])
def test_refusals_exit_1_with_their_code(monkeypatch, capsys, status, body, message):
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body) if body is not None else httpx.Response(status, text="<html/>")

    assert run_cli(monkeypatch, capsys, answer, ["balance"]) == (1, "", f"genservice-client: {message}\n")


def test_a_broken_config_file_is_a_message(monkeypatch, capsys, tmp_path):
    (tmp_path / "client.toml").write_text(f'api_key = "{KEY}\nurl = 3\n')
    code, _, err = run_cli(monkeypatch, capsys, refused, ["balance"],
                           {"GENSERVICE_CONFIG": str(tmp_path / "client.toml"), "GENSERVICE_API_KEY": ""})
    assert code == 2 and KEY not in err
    assert err == (f"genservice-client: cannot read the config file {tmp_path / 'client.toml'}: "
                   "Illegal character '\\n' (at line 1, column 32)\n")


def test_a_missing_file_to_upload_is_a_message(monkeypatch, capsys, tmp_path):
    code, _, err = run_cli(monkeypatch, capsys, refused, ["upload", str(tmp_path / "no.png")])
    assert (code, err) == (1, f"genservice-client: No such file or directory: {tmp_path / 'no.png'}\n")


def test_an_interrupt_exits_130(monkeypatch, capsys):
    def interrupted(request: httpx.Request) -> httpx.Response:
        raise KeyboardInterrupt

    assert run_cli(monkeypatch, capsys, interrupted, ["balance"]) == (130, "", "genservice-client: interrupted\n")


# -- a job's event stream that never ends ---------------------------------------------------

RUNNING = {"request_id": "j1", "status": "running"}


class FakeTime:
    """The sync client's clock: a keep-alive moves it on 15 s, a sleep by its length."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_stream_of_keep_alives_ends_at_the_timeout(monkeypatch):
    clock = FakeTime()
    monkeypatch.setattr(client_mod, "time", clock)

    def keep_alives():
        for _ in range(40):  # 10 minutes of them: past the timeout, fail rather than hang
            clock.now += 15
            yield b": keep-alive\n\n"
        raise AssertionError("read on past the timeout")

    def node(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=keep_alives())
        return httpx.Response(200, json=RUNNING)

    c = gc.Client(KEY, URL, http=httpx.Client(base_url=URL, transport=httpx.MockTransport(node)))
    with pytest.raises(TimeoutError, match="job j1 did not end in 60 s"):
        c.wait("j1", timeout=60)
    assert clock.now < 1000 + 60 + 15 + 1


def test_an_async_stream_of_keep_alives_ends_at_the_timeout():
    async def keep_alives():
        for _ in range(40):
            await trio.sleep(15)
            yield b": keep-alive\n\n"
        raise AssertionError("read on past the timeout")

    async def node(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=keep_alives())
        return httpx.Response(200, json=RUNNING)

    async def scenario() -> float:
        async with gc.AsyncClient(KEY, URL) as c:
            c.http = httpx.AsyncClient(base_url=URL, transport=httpx.MockTransport(node))
            with pytest.raises(TimeoutError, match="job j1 did not end in 60 s"):
                await c.wait("j1", timeout=60)
        return trio.current_time()

    assert trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0)) <= 60 + 1


# -- answers without end ----------------------------------------------------------------------

def endless(sent: list) -> object:
    def chunks():
        while len(sent) < 1000:  # 64 MiB: past the bound, fail rather than fill the memory
            sent.append(1)
            yield b" " * 65536
        raise AssertionError("read on past the bound")
    return chunks()


@pytest.mark.parametrize("status", [200, 500])
def test_an_answer_without_end_is_read_to_a_bound(status):
    sent: list = []

    def node(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers={"Content-Type": "application/json"}, content=endless(sent))

    c = gc.Client(KEY, URL, max_retries=0, http=httpx.Client(base_url=URL, transport=httpx.MockTransport(node)))
    with pytest.raises(gc.GenserviceError) as e:
        c.balance()
    assert (e.value.status, e.value.code, e.value.message) == (
        status, "response.too_large", "The answer is larger than 16 MiB.")
    assert len(sent) <= 16 * 16 + 1


@pytest.mark.parametrize("header, retry_after", [("2", 2.0), ("1.5", 1.5), ("²", None), ("١", None), ("-1", None),
                                                 ("Wed, 21 Oct 2015 07:28:00 GMT", None)])
def test_a_retry_after_is_ascii_seconds_or_none(header, retry_after):
    r = httpx.Response(429, headers=[(b"Retry-After", header.encode())], json={"error": {"code": "request.rate_limited",
                                                                             "message": "Slow down."}})
    e = gc.errors.from_response(r)
    assert (type(e), e.retry_after) == (gc.RateLimited, retry_after)


def test_a_config_file_others_can_read_is_warned_of(monkeypatch, capsys, tmp_path):
    config = tmp_path / "client.toml"
    config.write_text(f'api_key = "{KEY}"\n')
    config.chmod(0o644)
    env = {"GENSERVICE_CONFIG": str(config), "GENSERVICE_API_KEY": ""}
    code, _, err = run_cli(monkeypatch, capsys, refused, ["balance"], env)
    assert code == 1 and err.splitlines()[0] == (
        f"genservice-client: warning: {config} holds the key and other users have access to it (chmod 600 it)")
    config.chmod(0o600)
    code, _, err = run_cli(monkeypatch, capsys, refused, ["balance"], env)
    assert code == 1 and "warning" not in err
