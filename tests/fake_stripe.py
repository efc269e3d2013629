"""A tiny fake of the Stripe API endpoints the service uses, for tests with the real SDK.

stripe-mock cannot be installed here (notes/stack.md §8), so this is a quart-trio app on
Hypercorn, 127.0.0.1 port 0; point `StripeClient(base_addresses={"api": fake.url})` at it.

    POST /v1/checkout/sessions          form-encoded create; honours Idempotency-Key (same
                                        key + same body -> the same session; same key +
                                        another body -> 400 idempotency_error, like Stripe)
    GET  /v1/checkout/sessions/{id}     retrieve (404 resource_missing when unknown)
    POST /v1/checkout/sessions/{id}/expire

Knobs: `fail_next(status, times=1, retry=None)` answers the next creates with an error
(`retry` sets the `Stripe-Should-Retry` header); `delay` seconds before answering;
`requests` records every request (method, path, headers, parsed form). Helpers build the
webhook bodies Stripe would send: `event(type, session, **changes)` returns the JSON text.

    async with fake_stripe(nursery) as fake:
        fake.url; fake.sessions; fake.event("checkout.session.completed", session_id)
"""

from __future__ import annotations

import json
import secrets
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart import request
from quart_trio import QuartTrio

SECRET_KEY = "sk_test_fake_0123456789"
WEBHOOK_SECRET = "whsec_fake_0123456789"


def unflatten(pairs) -> dict:
    """`a[b][0][c]=v` form keys (Stripe's encoding) -> nested dicts and lists."""
    root: dict = {}
    for key, value in pairs:
        parts = key.replace("]", "").split("[")
        node = root
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
    return _lists(root)


def _lists(node):
    if isinstance(node, dict):
        if node and all(k.isdigit() for k in node):
            return [_lists(node[k]) for k in sorted(node, key=int)]
        return {k: _lists(v) for k, v in node.items()}
    return node


@dataclass
class Seen:
    method: str
    path: str
    headers: dict
    form: dict


@dataclass
class FakeStripe:
    url: str = ""
    sessions: dict = field(default_factory=dict)
    requests: list = field(default_factory=list)
    idempotent: dict = field(default_factory=dict)  # key -> (form, response json, status)
    failures: list = field(default_factory=list)  # (status, retry header)
    delay: float = 0.0

    def fail_next(self, status: int, times: int = 1, retry: bool | None = None) -> None:
        self.failures.extend([(status, retry)] * times)

    @property
    def creates(self) -> list[Seen]:
        return [r for r in self.requests if r.method == "POST" and r.path == "/v1/checkout/sessions"]

    def new_session(self, form: dict) -> dict:
        sid = "cs_test_" + secrets.token_hex(12)
        item = form["line_items"][0]
        amount = int(item["price_data"]["unit_amount"]) * int(item.get("quantity", "1"))
        session = {
            "id": sid, "object": "checkout.session", "livemode": False, "mode": form.get("mode"),
            "status": "open", "payment_status": "unpaid", "amount_total": amount,
            "currency": item["price_data"]["currency"], "client_reference_id": form.get("client_reference_id"),
            "metadata": form.get("metadata", {}), "success_url": form.get("success_url"),
            "cancel_url": form.get("cancel_url"), "created": int(time.time()),
            "expires_at": int(time.time()) + 86400, "url": f"https://checkout.stripe.test/c/pay/{sid}",
            "payment_intent": None,
        }
        self.sessions[sid] = session
        return session

    def event(self, type_: str, session_id: str, event_id: str | None = None, **changes) -> str:
        """The JSON body of a webhook about one session; `changes` edit the session copy."""
        obj = dict(self.sessions[session_id]) if session_id in self.sessions else {
            "id": session_id, "object": "checkout.session", "metadata": {}}
        if type_ == "checkout.session.completed":
            obj.update(status="complete", payment_status="paid", payment_intent="pi_" + secrets.token_hex(8))
        elif type_ == "checkout.session.expired":
            obj.update(status="expired", url=None)
        obj.update(changes)
        return json.dumps({
            "id": event_id or "evt_" + secrets.token_hex(12), "object": "event",
            "api_version": "2026-10-28.endive", "created": int(time.time()), "livemode": False,
            "pending_webhooks": 1, "request": {"id": None, "idempotency_key": None},
            "type": type_, "data": {"object": obj},
        })

    def app(self) -> QuartTrio:
        app = QuartTrio("fake_stripe")

        def error(status: int, type_: str, message: str, code: str | None = None, headers=None):
            return {"error": {"type": type_, "message": message, "code": code}}, status, headers or {}

        @app.before_request
        async def record():
            form = {}
            if request.method == "POST":
                form = unflatten((await request.form).items(multi=True))
            self.requests.append(Seen(request.method, request.path, dict(request.headers), form))
            if not request.headers.get("Authorization", "").startswith("Bearer sk_"):
                return error(401, "invalid_request_error", "Invalid API Key provided")
            if self.delay:
                await trio.sleep(self.delay)

        @app.post("/v1/checkout/sessions")
        async def create():
            seen = self.requests[-1]
            key = request.headers.get("Idempotency-Key")
            if key and key in self.idempotent:
                form, body, status = self.idempotent[key]
                if form != seen.form:
                    return error(400, "idempotency_error",
                                 "Keys for idempotent requests can only be used with the same parameters")
                return body, status, {"Idempotent-Replayed": "true"}
            if self.failures:
                status, retry = self.failures.pop(0)
                headers = {} if retry is None else {"Stripe-Should-Retry": "true" if retry else "false"}
                return error(status, "api_error", "The fake is told to fail.", headers=headers)
            for need in ("mode", "success_url", "line_items"):
                if need not in seen.form:
                    return error(400, "invalid_request_error", f"Missing required param: {need}.",
                                 "parameter_missing")
            session = self.new_session(seen.form)
            if key:
                self.idempotent[key] = (seen.form, session, 200)
            return session

        @app.get("/v1/checkout/sessions/<sid>")
        async def retrieve(sid: str):
            if sid not in self.sessions:
                return error(404, "invalid_request_error", f"No such checkout.session: '{sid}'",
                             "resource_missing")
            return self.sessions[sid]

        @app.post("/v1/checkout/sessions/<sid>/expire")
        async def expire(sid: str):
            if sid not in self.sessions:
                return error(404, "invalid_request_error", f"No such checkout.session: '{sid}'",
                             "resource_missing")
            self.sessions[sid].update(status="expired", url=None)
            return self.sessions[sid]

        return app


@asynccontextmanager
async def fake_stripe(nursery: trio.Nursery):
    fake = FakeStripe()
    cfg = Config()
    cfg.bind = ["127.0.0.1:0"]
    cfg.accesslog = None
    cfg.errorlog = None
    cfg.graceful_timeout = 0
    stop = trio.Event()
    urls = await nursery.start(partial(serve, fake.app(), cfg, shutdown_trigger=stop.wait))
    fake.url = next(u for u in urls if u.startswith("http://"))
    try:
        yield fake
    finally:
        stop.set()
