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

Labels come only from the node's own sets: `route` is a matched route template (else
`unmatched`), `method` one of METHODS (else `other`), so clients cannot add series.
"""

from __future__ import annotations

from collections.abc import Callable

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


class Metrics:
    def __init__(self, backlog: Callable[[], dict[str, int]], open_streams: Callable[[], int]) -> None:
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

    def text(self) -> bytes:
        return generate_latest(self.registry)
