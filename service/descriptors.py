"""File descriptors: the node's limit, raised at start, and a quiet accept loop when they run out.

Every open connection is a descriptor. At start the soft RLIMIT_NOFILE is raised to the
hard limit (systemd's `LimitNOFILE=` sets both; README, "Running it for real"), and the
event streams' node-wide bound is read from it (service/streams/limits.py), so streams
alone never use the last descriptors.

When descriptors do run out (many idle connections at once), trio's accept loop logs an
error with a traceback and retries every 0.1 s: a traceback ten times a second (probe H1).
`QuietAccept` keeps that to one plain line per `EVERY_S` with the count of refused accepts
since the last line; the loop keeps retrying (a timer, no CPU), so new connections are
taken again as soon as descriptors are free.
"""

from __future__ import annotations

import logging
import resource
import time

log = logging.getLogger("service")

ACCEPT_LOGGER = "trio.serve_listeners"  # trio's accept loop (used by Hypercorn)
EVERY_S = 30.0
MAX_SOFT = 1 << 20  # when the hard limit is unlimited


def raise_nofile() -> tuple[int, int]:
    """Raise the soft descriptor limit to the hard one; (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, MAX_SOFT)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:  # e.g. above the kernel's nr_open
            log.warning("could not raise the file descriptor limit from %d to %d: %s", soft, target, e)
    return resource.getrlimit(resource.RLIMIT_NOFILE)


class QuietAccept(logging.Filter):
    """On trio's accept-loop logger: no traceback, one line per EVERY_S (the rest counted)."""

    def __init__(self, clock=time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self.last = -EVERY_S
        self.skipped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        if now - self.last < EVERY_S:
            self.skipped += 1
            return False
        reason = record.args[1] if isinstance(record.args, tuple) and len(record.args) > 1 else "no resources"
        record.msg = ("cannot accept connections: %s; new connections wait until descriptors are free "
                      "(%d more refused accepts since the last line)")
        record.args = (reason, self.skipped)
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        self.last, self.skipped = now, 0
        return True


def quiet_accept_loop() -> QuietAccept:
    """Install the filter once on trio's accept-loop logger (idempotent)."""
    logger = logging.getLogger(ACCEPT_LOGGER)
    for f in logger.filters:
        if isinstance(f, QuietAccept):
            return f
    f = QuietAccept()
    logger.addFilter(f)
    return f
