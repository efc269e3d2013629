"""`POST /logout` (CSRF-checked form): the session row is deleted and the cookie cleared."""

from __future__ import annotations

from quart import Blueprint, redirect
from quart_schema import hide

from service.http.auth import node
from service.http.browser import SESSION_COOKIE, csrf_protected, session_token, set_cookie

bp = Blueprint("logout", __name__)


@bp.post("/logout")
@hide
@csrf_protected
async def logout():
    token = session_token()
    if token:
        await node().sessions.end_session(token)
    resp = redirect("/login", 303)
    set_cookie(resp, SESSION_COOKIE, "", 0)  # cleared with the flags it was set with (Secure behind https)
    return resp
