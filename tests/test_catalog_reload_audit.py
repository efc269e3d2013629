"""Catalog reloads: a SIGHUP reload is in the audit log, and two reloads at once leave
the file read last in force and reported (one reload awaits an engine's first health round)."""

from __future__ import annotations

import os
import signal

import pytest
import trio

from service.reload import reload_on_sighup
from tests.conftest import until
from tests.test_catalog_reload import COG, model, reloadable  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("cheap_hashes")


async def test_a_sighup_reload_is_audited_with_its_outcome(reloadable):  # noqa: F811
    n = reloadable
    n.catalog_path.write_text(model("painter", "1.00", backend="nope"))
    async with trio.open_nursery() as nursery:
        await nursery.start(reload_on_sighup, n.parts)
        os.kill(os.getpid(), signal.SIGHUP)
        await until(lambda: n.store.scalar("SELECT COUNT(*) FROM operator_audit WHERE who = 'SIGHUP'") == 1)
        n.catalog_path.write_text(model("painter", "4.00"))
        os.kill(os.getpid(), signal.SIGHUP)
        await until(lambda: n.store.scalar("SELECT COUNT(*) FROM operator_audit WHERE who = 'SIGHUP'") == 2)
        nursery.cancel_scope.cancel()
    rows = n.store.all("SELECT who, address, action, target, detail FROM operator_audit WHERE who = 'SIGHUP' "
                       "ORDER BY seq")
    source = str(n.catalog_path)
    assert [(r["who"], r["address"], r["action"], r["target"]) for r in rows] == [
        ("SIGHUP", "local", "catalog.reload", source), ("SIGHUP", "local", "catalog.reload", source)]
    assert rows[0]["detail"].startswith("refused: ") and "unknown backend 'nope'" in rows[0]["detail"]
    assert rows[1]["detail"] == "in force"


async def test_a_sighup_reload_that_fails_leaves_the_next_one_working(reloadable, monkeypatch, caplog):  # noqa: F811
    """The audit's write failing (a full disk) ended the signal task, and with it the node."""
    n = reloadable
    audit = n.parts.console.audit
    calls = []

    async def failing_once(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return await audit(*args, **kwargs)

    monkeypatch.setattr(n.parts.console, "audit", failing_once)
    n.catalog_path.write_text(model("painter", "4.00"))
    async with trio.open_nursery() as nursery:
        await nursery.start(reload_on_sighup, n.parts)
        os.kill(os.getpid(), signal.SIGHUP)
        await until(lambda: len(calls) == 1)
        os.kill(os.getpid(), signal.SIGHUP)
        await until(lambda: n.store.scalar("SELECT COUNT(*) FROM operator_audit WHERE who = 'SIGHUP'") == 1)
        nursery.cancel_scope.cancel()
    assert "the catalog reload asked by SIGHUP failed" in caplog.text

async def test_overlapping_reloads_leave_the_last_file_in_force_and_reported(reloadable, settling_clock):  # noqa: F811
    n = reloadable
    silent = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]  # accepts, never answers
    port = silent.socket.getsockname()[1]
    n.catalog_path.write_text(model("painter", "1.00") +
                              model("cogged", "1.00", backend="cog", extra=COG.format(url=f"http://127.0.0.1:{port}")))
    answers = {}
    async with trio.open_nursery() as nursery:
        async def reload(name: str) -> None:
            r = await n.op("POST", "/catalog/reload")
            answers[name] = (r.status_code, await r.get_json())

        nursery.start_soon(reload, "first")  # awaits the silent server's first health round (FIRST_S)
        await until(lambda: "cogged" in n.parts.engines.pools)
        n.catalog_path.write_text(model("painter", "2.00"))
        await reload("second")
    await silent.aclose()
    assert answers == {"first": (200, {"data": {"models": ["painter", "cogged"]}}),
                       "second": (200, {"data": {"models": ["painter"]}})}
    assert [m.id for m in n.parts.catalog.models] == ["painter"]
    last = n.parts.console.last_reload
    assert (last.who, last.models) == ("operator API", ["painter"])
