"""The test SMTP server (tests/smtp_server.py) leaves no socket for the GC when it stops
with TLS connections still open or still closing: aiosmtpd's own stop did, and the GC's
ResourceWarning then failed whichever test was running when it came."""

from __future__ import annotations

import gc
import smtplib
import ssl
import warnings

import pytest

from smtp_server import SmtpServer


def unclosed_after(stop) -> list[str]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        stop()
        gc.collect()
    return [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]


@pytest.mark.parametrize("client", ["open", "dropped"])
def test_a_stop_closes_tls_connections_still_open_or_closing(tmp_path, client):
    server = SmtpServer(tmp_path, "tls").start()
    tls = ssl.create_default_context(cafile=server.ca_file)
    conn = smtplib.SMTP_SSL("127.0.0.1", server.port, context=tls, timeout=10)
    assert conn.ehlo()[0] == 250
    if client == "dropped":  # gone without QUIT or TLS close: the server's close waits for it
        conn.sock.close()

    def stop():
        server.stop()
        conn.close()

    assert unclosed_after(stop) == []
