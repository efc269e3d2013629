"""The app's per-request shortcuts (service/http/app.py, service/metrics.py): each gives
what Quart's or the registry's own call gives, without its cost on every request."""

from __future__ import annotations

import functools

import pytest
import quart.app

from service.http.app import App
from service.metrics import Metrics


async def view() -> str:
    return "async"


def sync_view() -> str:
    return "sync"


class Handlers:
    async def hook(self) -> str:
        return "method"


async def test_async_functions_and_methods_are_answered_without_quarts_check(monkeypatch):
    def refused(func):
        raise AssertionError(f"Quart's check asked for {func!r}")

    monkeypatch.setattr(quart.app, "iscoroutinefunction", refused)
    app = App("t")
    handlers = Handlers()
    assert app.ensure_async(view) is view
    assert app.ensure_async(handlers.hook) == handlers.hook
    assert await app.ensure_async(handlers.hook)() == "method"
    with pytest.raises(AssertionError, match="Quart's check"):  # anything else is Quart's to answer
        app.ensure_async(functools.partial(view))


async def test_anything_else_is_made_async_as_quart_does():
    app = App("t")
    wrapped = app.ensure_async(sync_view)
    assert wrapped is not sync_view and await wrapped() == "sync"  # run in a thread, as quart-trio does
    partial = functools.partial(view)
    assert app.ensure_async(partial) is partial  # Quart's own check finds the coroutine function


def test_answers_are_counted_per_label_set_with_made_up_methods_as_other():
    metrics = Metrics(dict, lambda: 0)
    metrics.answered("/healthz", "GET", 200, 0.5)
    metrics.answered("/healthz", "GET", 200, 1.5)
    metrics.answered("/healthz", "GET", 404, 0.1)
    for i in range(400):
        metrics.answered("unmatched", f"WEIRD{i}", 405, 0.1)
    reg = metrics.registry
    count = reg.get_sample_value
    assert count("genservice_http_requests_total", {"route": "/healthz", "method": "GET", "status": "200"}) == 2
    assert count("genservice_http_requests_total", {"route": "/healthz", "method": "GET", "status": "404"}) == 1
    assert count("genservice_http_requests_total", {"route": "unmatched", "method": "other", "status": "405"}) == 400
    assert count("genservice_http_request_seconds_sum", {"route": "/healthz", "method": "GET"}) == pytest.approx(2.1)
    assert count("genservice_http_request_seconds_count", {"route": "unmatched", "method": "other"}) == 400
    assert len(metrics._answered) == 3  # the children kept: one per label set, not per method string
