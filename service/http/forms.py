"""Dashboard forms: Post/Redirect/Get with a one-time notice, and a token per rendered form
so that a form sent twice (a double click, Back and send again) creates one thing.

A form post that succeeds answers 303 to a page; what it has to say (a notice, or a secret
shown once such as a new API key) waits for that browser session's next full page view
(`notify`, then `dashboard.show` takes it). A reload then repeats the GET, never the post.

Forms that create carry a hidden `form_token`, new on every render. `once` runs the create
for the first post of a token; a repeat (while the first runs, or after) is sent to the page
the first went to, with a notice, and creates nothing. A refused post frees its token: the
page shown again has a new one anyway. Both live in the node's memory, bounded (the oldest go
first); a restart forgets them, which only matters for a form sent again across a restart.
A notice not taken within ten minutes is dropped: a secret shown once never waits longer.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from typing import Awaitable, Callable

from quart import current_app, redirect, request

from service.http.auth import node
from service.http.browser import current_session

ALREADY_SENT = "This form was already sent; nothing was done again."
MAX_SESSIONS = 10_000   # sessions with notices waiting
MAX_NOTICES = 5         # per session
MAX_TOKENS = 100_000    # used form tokens remembered
NOTICE_TTL = 600.0      # seconds a notice waits for the next page view


class FormMemory:
    def __init__(self) -> None:
        self.notices: OrderedDict[str, list[dict]] = OrderedDict()
        self.tokens: OrderedDict[tuple[str, str], str] = OrderedDict()  # -> where the first went ("": running)

    def add_notice(self, session_id: str, notice: dict, now: float) -> None:
        waiting = self.notices.setdefault(session_id, [])
        self.notices.move_to_end(session_id)
        waiting.append({**notice, "_at": now})
        del waiting[:-MAX_NOTICES]
        # oldest first: drop sessions past the bound, and those whose last notice expired
        while self.notices and (len(self.notices) > MAX_SESSIONS
                                or next(iter(self.notices.values()))[-1]["_at"] < now - NOTICE_TTL):
            self.notices.popitem(last=False)

    def take_notices(self, session_id: str, now: float) -> list[dict]:
        return [n for n in self.notices.pop(session_id, []) if n["_at"] >= now - NOTICE_TTL]

    def remember(self, key: tuple[str, str], where: str) -> None:
        self.tokens[key] = where
        self.tokens.move_to_end(key)
        while len(self.tokens) > MAX_TOKENS:
            self.tokens.popitem(last=False)


def memory() -> FormMemory:
    return current_app.config.setdefault("FORM_MEMORY", FormMemory())


def new_token() -> str:
    """A fresh `form_token` for a form that creates (templates call it once per form)."""
    return secrets.token_urlsafe(16)


def notify(text: str | None, **shown_once) -> None:
    """Tell the session's next page view: `text` as its notice, `shown_once` as page values."""
    s = current_session()
    if s is not None:
        memory().add_notice(s.id, {"text": text, **shown_once}, node().clock.now())


def take() -> dict:
    """The notices waiting for this session, as page values (`flash` and the shown-once ones);
    only a full page view takes them (not a form fragment refreshed by script)."""
    s = current_session()
    if s is None or request.method != "GET" or request.headers.get("HX-Request"):
        return {}
    waiting = memory().take_notices(s.id, node().clock.now())  # service time: the mock clock in tests
    out: dict = {}
    texts = [n["text"] for n in waiting if n.get("text")]
    if texts:
        out["flash"] = " ".join(texts)
    for n in waiting:
        out.update({k: v for k, v in n.items() if k not in ("text", "_at")})
    return out


async def once(form, create: Callable[[], Awaitable], fallback: str):
    """Run `create` for the first post of this form's token; a repeat goes where the first
    went (or to `fallback` while it still runs) with the ALREADY_SENT notice."""
    s = current_session()
    token = form.get("form_token", "")
    if s is None or not token:
        return await create()
    mem, key = memory(), (s.id, token[:64])
    if key in mem.tokens:
        notify(ALREADY_SENT)
        return redirect(mem.tokens[key] or fallback, 303)
    mem.remember(key, "")
    try:
        response = await create()
    except BaseException:
        mem.tokens.pop(key, None)
        raise
    if response.status_code in (302, 303):
        mem.remember(key, response.headers["Location"])
    else:
        mem.tokens.pop(key, None)
    return response
