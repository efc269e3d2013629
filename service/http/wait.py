"""A submit that waits: `Prefer: wait=N` (RFC 7240) on either submit route holds the answer
until the job is final or N seconds have passed, as Replicate's `Prefer: wait` does.

Why: a short job followed on its event stream costs the client a second request and the node
a stream's opening, its events and its end; a submit that waits answers the final status in
the one request. Rules (docs/streams.md, "A submit that waits"):

- `wait=N`, N whole seconds; above MAX_WAIT_S it waits MAX_WAIT_S; `wait` alone waits
  MAX_WAIT_S; `wait=0` or `respond-async` beside it: no waiting. A `wait` whose value is not a
  whole number is 400 `request.bad_request`, before anything is made. Other preferences are
  ignored, as RFC 7240 asks.
- Final in time: 200 with the job's status object (the same as `GET .../status`). Not final
  in time: the usual 202. Either way `Preference-Applied: wait=N` says the node waited.
- A waiting submit holds its connection as an event stream does, so it counts under the same
  limits (per key, session, organization, node: service/streams/limits.py). Over one of them,
  or while the node shuts down, the submit answers 202 at once without `Preference-Applied`:
  the job is made either way, and the client follows it as it would without the preference.
- The job does not depend on the wait: a client that leaves, or a wait that ends, leaves the
  job running (unlike the OpenAI-compatible door, whose call is the job's only answer).
"""

from __future__ import annotations

import json

import trio
from quart import g, request
from werkzeug.http import parse_dict_header

from service.digits import ascii_int
from service.errors import BadRequest, RateLimited
from service.http.auth import ROUTE_LIMIT
from service.machines import JOB
from service.streams.hub import Hub, Subscription
from service.streams.limits import Owner, Ticket
from service.views.shapes import JobStatus

MAX_WAIT_S = 60  # as Replicate's; a client wanting longer follows the job's event stream


def wanted_wait() -> int:
    """Seconds the caller prefers to wait for the job's end (0: answer at once); read once
    a request (the route's time limit and the route both ask)."""
    seconds = getattr(g, "prefer_wait", None)
    if seconds is None:
        seconds = g.prefer_wait = _parse(request.headers.get("Prefer"))
    return seconds


def _parse(header: str | None) -> int:
    if not header:
        return 0
    prefs = {name.split(";")[0].strip().lower(): (value or "").split(";")[0].strip().strip('"')
             for name, value in parse_dict_header(header).items()}
    if "wait" not in prefs:
        return 0
    value = prefs["wait"]
    seconds = ascii_int(value, MAX_WAIT_S)
    if value and seconds is None:
        raise BadRequest("Prefer: wait must be a whole number of seconds (at most 60 are waited).",
                         {"header": "Prefer"})
    if "respond-async" in prefs:
        return 0
    return MAX_WAIT_S if seconds is None else seconds  # `wait` with no value: the most waited


def route_limit() -> int:
    """The submit routes' time limit: the usual one, plus the wait asked for."""
    return ROUTE_LIMIT + wanted_wait()


def place(hub: Hub, owner: Owner) -> Ticket | None:
    """A place under the stream limits for the wait, or None (no place, or shutting down)."""
    if hub.closed.is_set():
        return None
    try:
        return hub.limits.admit(owner)
    except RateLimited:
        return None


async def final_status(gen, hub: Hub, job_id: str, org_id: str, seconds: int) -> JobStatus | None:
    """The job's status object once it is final, or None when `seconds` pass first or the
    node shuts down. Subscribed before the status is read, so an end committed in between
    is in the status or in the subscription, never in neither (actors publish after their
    commit). The final event's data is the job's status object as its final commit left it
    (service/actors/jobs/actor.py `_finish`), so it is answered without reading it again; a
    job its live actor holds open is not read at all (`Generation.open_in`)."""
    with trio.move_on_after(seconds):
        while True:
            sub = hub.subscribe(f"job:{job_id}", None, resumable=False).sub
            try:
                if not gen.open_in(job_id, org_id):  # else: no read (open), the end comes on `sub`
                    status = gen.status(job_id, org_id)
                    if status is None or status["status"] in JOB.final:
                        return status
                if hub.closed.is_set():  # closed while the job was made: no close ends `sub`
                    return None
                try:
                    return await _final_event(sub)
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    if hub.closed.is_set():
                        return None
                    # dropped for lagging: read the status again and follow anew
            finally:
                sub.close()
    return None


async def _final_event(sub: Subscription) -> JobStatus:
    """The status object of the first final status event on `sub` (the one the job's final
    commit published); the channel's end or close is raised to the caller."""
    while True:
        event = await sub.receive.receive()
        if event.name == "status":
            data = json.loads(event.data)
            if data.get("status") in JOB.final:
                final: JobStatus = data
                return final
