"""Opening a session once a person is proved (password, provider, reset link, invitation).

A person is one identity across organizations: they log in as themselves, not into an
organization. With one membership the session opens in it; with several it opens unchosen
and the person lands on the organization switcher (`/organizations`), so nobody acts in an
organization they did not pick. The session records the organization chosen; switching
opens a new session (the cookie rotates) in another membership of the same person.
"""

from __future__ import annotations

from urllib.parse import quote

from quart import redirect

from service.actors.sessions import ABSOLUTE
from service.http.auth import node
from service.http.browser import SESSION_COOKIE, session_token, set_cookie
from service.storage import identity as identity_sql

SWITCHER = "/organizations"


async def enter(user_id: str, org_id: str, next_path: str, chosen: bool = True):
    """A new session (the browser's previous one ends) for this membership, then `next_path`."""
    out = await node().sessions.start_session(user_id, org_id, session_token(), chosen=chosen)
    resp = redirect(next_path, 303)
    set_cookie(resp, SESSION_COOKIE, out["token"], int(ABSOLUTE))
    return resp


async def sign_in(email: str, next_path: str):
    """The response that logs the person `email` in, or None when they have no membership left."""
    rows = identity_sql.memberships(node().store, email)
    if not rows:
        return None
    first = rows[0]
    if len(rows) == 1:
        return await enter(first["user_id"], first["organization_id"], next_path)
    return await enter(first["user_id"], first["organization_id"],
                       f"{SWITCHER}?next={quote(next_path, safe='/')}", chosen=False)
