"""Logging set-up: plain lines, or one JSON object per line (`GENSERVICE_LOG_FORMAT=json`)
with the request's id when the line was written while handling a request, so a client's
`request_id` from an error body finds its lines."""

from __future__ import annotations

import contextvars
import json
import logging
import time

QUIET = ("httpx",)  # its warnings and errors still show
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        request_id = REQUEST_ID.get()
        if request_id:
            out["request_id"] = request_id
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    # httpx logs every request's full URL at INFO: a query can carry a token (a presigned
    # output URL, a webhook URL's own), and a line for each engine call cost the node a
    # fortieth of its CPU at 64 jobs in flight (bench/README.md). httpcore's DEBUG lines name
    # no URL and stay for DEBUG.
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
