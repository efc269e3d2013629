"""How many event streams may be open: per browser session, per API key, per organization,
and on the whole node.

A stream holds a connection, and a connection holds a file descriptor for as long as the
stream is open (hours). Unbounded, one member's 260 streams used up a 256-descriptor limit
and the node stopped accepting anyone's connections (probe H1). So a stream is admitted
only under every bound that applies to it, and the node's total stays `HEADROOM` below the
descriptor limit read at start (`descriptor_budget`), which leaves descriptors for every
other request, the database and outgoing calls.

Refusals: 429 `request.rate_limited` for a session, key or organization over its bound (the
caller can close one of its own streams), 503 `request.service_unavailable` when the node is
full; both with Retry-After. docs/streams.md lists them.
"""

from __future__ import annotations

import resource
from collections import Counter
from dataclasses import dataclass

from service.errors import RateLimited

PER_SESSION = 10  # a browser: a few tabs, each following one page (GENSERVICE_MAX_STREAMS_PER_SESSION)
PER_KEY = 20  # GENSERVICE_MAX_STREAMS_PER_KEY
PER_ORG = 50  # GENSERVICE_MAX_STREAMS_PER_ORG
RETRY_S = 5
MIN_HEADROOM = 128  # descriptors kept for everything that is not a stream
MIN_TOTAL = 16


class NodeFull(RateLimited):
    """503 with Retry-After: the node holds as many streams as its descriptors allow."""

    status = 503
    code = "request.service_unavailable"


def descriptor_budget(soft_limit: int) -> int:
    """Streams the node may hold under a descriptor limit: a quarter of it, at least
    MIN_HEADROOM, stays free for everything else."""
    headroom = max(MIN_HEADROOM, soft_limit // 4)
    return max(MIN_TOTAL, soft_limit - headroom)


def current_budget() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return descriptor_budget(soft if soft != resource.RLIM_INFINITY else 1 << 20)


@dataclass(frozen=True)
class Owner:
    """Whose stream it is: its organization, and its API key or (dashboard) browser session."""

    org_id: str
    key_id: str | None = None
    session_id: str | None = None


class Ticket:
    """An admitted stream's place; `release` gives it back (once, however often called)."""

    def __init__(self, limits: StreamLimits, names: tuple[str, ...]) -> None:
        self._limits, self._names = limits, names
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._limits._give_back(self._names)


class StreamLimits:
    def __init__(self, *, per_session: int = PER_SESSION, per_key: int = PER_KEY, per_org: int = PER_ORG,
                 total: int | None = None) -> None:
        self.per_session, self.per_key, self.per_org = per_session, per_key, per_org
        self.total = current_budget() if total is None else total
        self.open: Counter[str] = Counter()
        self.count = 0

    def admit(self, owner: Owner) -> Ticket:
        """A place for one more stream of `owner`, or RateLimited (429) / NodeFull (503)."""
        checks = [(f"org:{owner.org_id}", self.per_org, "this organization")]
        if owner.key_id is not None:
            checks.insert(0, (f"key:{owner.key_id}", self.per_key, "this API key"))
        if owner.session_id is not None:
            checks.insert(0, (f"session:{owner.session_id}", self.per_session, "this browser session"))
        for name, limit, whose in checks:
            if limit > 0 and self.open[name] >= limit:  # 0: no bound
                raise RateLimited(f"Too many event streams open for {whose} (at most {limit}). Close one, "
                                  f"or retry in {RETRY_S} s.", RETRY_S, {"open_streams_limit": limit})
        if self.count >= self.total:
            raise NodeFull(f"The node holds as many event streams as it can. Retry in {RETRY_S} s.", RETRY_S)
        names = tuple(name for name, _, _ in checks)
        for name in names:
            self.open[name] += 1
        self.count += 1
        return Ticket(self, names)

    def _give_back(self, names: tuple[str, ...]) -> None:
        self.count -= 1
        for name in names:
            self.open[name] -= 1
            if self.open[name] <= 0:
                del self.open[name]
