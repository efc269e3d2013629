"""Prometheus metrics of one node (`GET /metrics`, text format, behind its own token:
GENSERVICE_METRICS_TOKEN; without one the route is 404). Each node has its own registry, so
nodes in one process (tests) never share counts.

    genservice_http_requests_total{route,method,status}        requests answered
    genservice_http_request_seconds{route,method}              time to answer (histogram)
    genservice_jobs_total{capability,model,status}             jobs by final status
    genservice_render_seconds{model,backend}                   render or engine time of a job
    genservice_holds_total{event}                              holds placed, captured, released
    genservice_outbox_backlog{table}                           rows waiting to go out (read at scrape)
    genservice_open_streams                                    event streams open now
    genservice_engine_jobs_queued{model}                       engine model: jobs waiting (slot or server)
    genservice_engine_jobs_running{model}                      engine model: jobs on a server now
    genservice_engine_servers{model,state}                     engine model: servers up / down (pools only)
    genservice_engine_time_to_start_seconds{model}             engine model: median submit -> rendering

Labels come only from the node's own sets: `route` is a matched route template (else
`unmatched`), `method` one of METHODS (else `other`), so clients cannot add series.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Only these become a `method` label; any other string a client sends is `other`, so no client
# can add series (probe M3: 400 made-up methods took /metrics to 113 MB).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"  # the route label of a request no route template matched


def method_label(method: str) -> str:
    return method if method in METHODS else "other"


class _Backlog:
    """A collector read at scrape time: `counts()` -> {table: rows waiting}."""

    def __init__(self, counts: Callable[[], dict[str, int]]) -> None:
        self.counts = counts

    def collect(self):
        family = GaugeMetricFamily("genservice_outbox_backlog", "Rows waiting to go out, per outbox table.",
                                   labels=["table"])
        for table, n in self.counts().items():
            family.add_metric([table], n)
        yield family


class _EngineQueues:
    """A collector read at scrape time: `views()` -> {model id: queue view} (engine_queue.py).
    Labels are the catalog's model ids only, so the series are bounded."""

    def __init__(self, views: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        self.views = views

    def collect(self):
        queued = GaugeMetricFamily("genservice_engine_jobs_queued",
                                   "Jobs of an engine model waiting for a slot or a server.", labels=["model"])
        running = GaugeMetricFamily("genservice_engine_jobs_running",
                                    "Jobs of an engine model running on a server.", labels=["model"])
        servers = GaugeMetricFamily("genservice_engine_servers", "Engine servers of a model, up or down.",
                                    labels=["model", "state"])
        start = GaugeMetricFamily("genservice_engine_time_to_start_seconds",
                                  "Median time from submit to rendering of an engine model's recent jobs.",
                                  labels=["model"])
        for model, v in self.views().items():
            queued.add_metric([model], v["queued"])
            running.add_metric([model], v["running"])
            if v["servers_up"] is not None:
                servers.add_metric([model, "up"], v["servers_up"])
                servers.add_metric([model, "down"], v["servers_down"])
            if v["time_to_start_p50_s"] is not None:
                start.add_metric([model], v["time_to_start_p50_s"])
        yield from (queued, running, servers, start)


class Metrics:
    def __init__(self, backlog: Callable[[], dict[str, int]], open_streams: Callable[[], int],
                 engine_queues: Callable[[], Mapping[str, Mapping[str, Any]]] = dict) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("genservice_http_requests", "HTTP requests answered.",
                                ["route", "method", "status"], registry=r)
        self.latency = Histogram("genservice_http_request_seconds", "Time to answer an HTTP request.",
                                 ["route", "method"], registry=r)
        self.jobs = Counter("genservice_jobs", "Jobs by final status.", ["capability", "model", "status"],
                            registry=r)
        self.render = Histogram("genservice_render_seconds", "Render or engine time of a job, start to end.",
                                ["model", "backend"], registry=r,
                                buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, float("inf")))
        self.holds = Counter("genservice_holds", "Credit holds placed, captured and released.", ["event"],
                             registry=r)
        streams = Gauge("genservice_open_streams", "Event streams open now.", registry=r)
        streams.set_function(open_streams)
        r.register(_Backlog(backlog))
        r.register(_EngineQueues(engine_queues))
        self._answered: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def answered(self, route: str, method: str, status: int, seconds: float) -> None:
        """One HTTP answer counted and timed. Each label set's two children are kept: the
        registry's `labels()` checks and locks at every call (about 1 % of a `/healthz`).
        The keys are the labels, as bounded (module docstring): a made-up method is `other`."""
        key = (route, method_label(method), status)
        if (children := self._answered.get(key)) is None:
            children = self._answered[key] = (self.requests.labels(route, key[1], str(status)),
                                              self.latency.labels(route, key[1]))
        children[0].inc()
        children[1].observe(seconds)

    def text(self) -> bytes:
        return generate_latest(self.registry)
