"""Dashboard routes without a browser (Quart test client): static files, the HTML 404 for
browsers only, sessions required, the Studio submit's source, keys shown once, role refusals
with their status and message, the streamed upload's CSRF, and the page event streams."""

from __future__ import annotations

import pytest
import trio

from service import passwords
from service.actors.sessions import SetPassword
from service.machines import JOB
from tests.pages import csrf, page
from waiting import wait_until

PW = "correct horse battery"
HTML = {"Accept": "text/html,application/xhtml+xml"}
FORGED = "This form was not sent from this site, or the page was open too long."


pytestmark = pytest.mark.usefixtures("cheap_hashes")


async def logged_in(node, role: str = "owner", email: str = "owner@acme.test") -> dict:
    org = await node.create_org(email=email)
    user_id = org["owner_user_id"]
    if role != "owner":
        email = f"{role}@acme.test"
        user_id = (await node.add_member(org["organization_id"], role, email))["user_id"]
    await node.parts.sessions.ask("sessions", SetPassword(email, await passwords.hash_password(PW), user_id,
                                                          org["organization_id"]))
    _, html = await page(node.client, "/login")
    r = await node.client.post("/login", form={"csrf_token": csrf(html), "email": email, "password": PW})
    assert r.status_code == 303
    return org


async def wait_final(node, key: str, job_id: str) -> dict:
    async def final() -> dict | None:
        r = await node.call("GET", f"/v1/generation/requests/{job_id}/status", key)
        body = await r.get_json()
        return body if body["status"] in JOB.final else None

    return await wait_until(final, 20, every=0.05)


async def test_static_files_are_served_with_cache_headers(node):
    r = await node.client.get("/static/htmx-2.0.11.min.js")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/javascript")
    assert r.headers["Cache-Control"] == "public, max-age=86400" and r.headers["ETag"]
    r = await node.client.get("/static/dash-2.css")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/css")
    for bad in ("/static/nothing.js", "/static/.hidden.js", "/static/dash.html"):
        r = await node.client.get(bad)
        assert r.status_code == 404
        assert (await r.get_json())["error"]["message"] == "File not found."


async def test_browsers_get_the_404_page_and_api_clients_the_envelope(node):
    r = await node.client.get("/no-such-page", headers=HTML)
    assert r.status_code == 404 and "<h1>Page not found</h1>" in await r.get_data(as_text=True)
    r = await node.client.get("/no-such-page")
    assert r.status_code == 404 and (await r.get_json())["error"]["code"] == "request.not_found"
    r = await node.client.get("/v1/no-such-route", headers=HTML)
    assert r.status_code == 404 and (await r.get_json())["error"]["code"] == "request.not_found"


async def test_pages_need_a_session(node):
    for path in ("/studio", "/billing?offset=50", "/history/events", "/keys"):
        r = await node.client.get(path)
        assert r.status_code == 302 or r.status_code == 303
        assert r.headers["Location"].startswith("/login?next=" + path.split("?")[0])


async def test_studio_submit_is_a_studio_job_and_its_stream_ends_with_the_final_status(node):
    org = await logged_in(node)
    _, html = await page(node.client, "/studio")
    assert "Price: <strong>1.00</strong> credits (1k)" in html
    r = await node.client.post("/studio", form={"csrf_token": csrf(html), "capability": "image.generate",
                                                "model": "proc-image", "prompt": "a fox", "resolution": "2k"})
    assert r.status_code == 303
    job_id = r.headers["Location"].rsplit("/", 1)[1]
    status = await wait_final(node, org["api_key"], job_id)
    assert (status["source"], status["status"], status["credits"]["actual"]) == ("studio", "completed", "2.00")
    r = await node.client.get(f"/studio/jobs/{job_id}/events")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    text = await r.get_data(as_text=True)
    assert text.count("event: status") == 1 and '"status":"completed"' in text


async def test_another_organizations_job_is_not_found(node):
    other = await node.create_org(name="Other", email="boss@other.test")
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", other["api_key"], json={"prompt": "x"})
    job_id = (await r.get_json())["request_id"]
    await logged_in(node)
    r = await node.client.get(f"/studio/jobs/{job_id}", headers=HTML)
    assert r.status_code == 404 and "Generation request not found." in await r.get_data(as_text=True)
    r = await node.client.get(f"/studio/jobs/{job_id}/events")
    assert r.status_code == 404 and (await r.get_json())["error"]["message"] == "Generation request not found."


async def test_a_new_key_is_shown_once(node):
    await logged_in(node)
    _, html = await page(node.client, "/keys")
    r = await node.client.post("/keys", form={"csrf_token": csrf(html), "name": "deploy"})
    assert r.status_code == 303 and r.headers["Location"] == "/keys"  # Post/Redirect/Get
    r, body = await page(node.client, "/keys")
    assert 'id="new-key">aak_' in body and r.headers["Cache-Control"] == "no-store"
    _, html = await page(node.client, "/keys")
    assert "deploy" in html and 'id="new-key"' not in html


async def test_role_refusals_have_their_status_and_message(node):
    await logged_in(node, role="member")
    _, html = await page(node.client, "/studio")
    for path, form in (("/keys", {"name": "x"}), ("/billing/threshold", {"threshold": "5"}),
                       ("/members/invite", {"email": "a@b.test", "role": "member"}), ("/settings", {"name": "X"})):
        r = await node.client.post(path, form={"csrf_token": csrf(html), **form})
        assert r.status_code == 403, path
        assert "Your role (member) does not allow this." in await r.get_data(as_text=True)


async def test_streamed_upload_needs_the_token_in_its_body(node):
    from tests.test_generation_support import multipart
    from tests.test_media_samples import image_bytes

    org = await logged_in(node)
    body, ctype = multipart([("file", "s.png", "image/png", image_bytes("PNG"))])
    r = await node.client.post("/assets/upload", data=body, headers={"Content-Type": ctype})
    assert r.status_code == 403 and FORGED in await r.get_data(as_text=True)
    _, html = await page(node.client, "/assets")
    r = await node.client.post(f"/assets/upload?csrf_token={csrf(html)}", data=body, headers={"Content-Type": ctype})
    assert r.status_code == 403  # a token in the address is not taken
    body, ctype = multipart([("csrf_token", csrf(html)),
                             ("file", "s.png", "image/png", image_bytes("PNG"))])
    r = await node.client.post("/assets/upload", data=body, headers={"Content-Type": ctype})
    assert r.status_code == 303 and r.headers["Location"] == "/assets"
    r = await node.call("GET", "/v1/generation/assets", org["api_key"])
    assert [(a["kind"], a["source"]) for a in (await r.get_json())["data"]] == [("image", "upload")]


async def test_top_up_outside_the_quote_is_refused_with_the_api_message(node):
    from service.payments.pricing import RANGE_MESSAGE

    await logged_in(node)
    _, html = await page(node.client, "/billing")
    for credits in ("5", "100000000"):
        r = await node.client.post("/billing/topups", form={"csrf_token": csrf(html), "credits": credits})
        assert r.status_code == 422 and RANGE_MESSAGE in await r.get_data(as_text=True)
    r = await node.client.post("/billing/topups", form={"csrf_token": csrf(html), "credits": "ten"})
    assert r.status_code == 422 and "Enter a whole number of credits." in await r.get_data(as_text=True)
    r = await node.client.post("/billing/topups", form={"csrf_token": csrf(html), "credits": "500"})
    assert r.status_code == 303 and "/checkout/test/" in r.headers["Location"]


async def test_members_change_role_resend_and_remove(node):
    org = await logged_in(node)
    org_id = org["organization_id"]
    _, html = await page(node.client, "/members")
    r = await node.client.post("/members/invite", form={"csrf_token": csrf(html), "email": "new@acme.test",
                                                        "role": "member"})
    # Post/Redirect/Get, and the link goes only to the invited mailbox: never shown to the
    # inviter (issue 22, C1)
    assert r.status_code == 303
    _, body = await page(node.client, "/members")
    assert "Invitation sent to new@acme.test" in body and "token=" not in body
    inv = node.store.one("SELECT id, token_hash FROM invitations WHERE email = 'new@acme.test'")
    r = await node.client.post(f"/members/invitations/{inv['id']}/resend", form={"csrf_token": csrf(html)})
    assert r.status_code == 303
    _, body = await page(node.client, "/members")
    assert "Invitation sent to new@acme.test" in body and "token=" not in body
    assert node.store.scalar("SELECT token_hash FROM invitations WHERE id = ?", (inv["id"],)) != inv["token_hash"]
    member = await node.add_member(org_id, "member", "m2@acme.test")
    r = await node.client.post(f"/members/{member['user_id']}/role", form={"csrf_token": csrf(html),
                                                                          "role": "read_only"})
    assert r.status_code == 303
    assert node.store.scalar("SELECT role FROM users WHERE id = ?", (member["user_id"],)) == "read_only"
    r = await node.client.post(f"/members/{org['owner_user_id']}/role", form={"csrf_token": csrf(html),
                                                                             "role": "member"})
    assert r.status_code == 409 and "The last owner cannot be" in await r.get_data(as_text=True)
    r = await node.client.post(f"/members/{member['user_id']}/remove", form={"csrf_token": csrf(html)})
    assert r.status_code == 303
    assert node.store.scalar("SELECT is_active FROM users WHERE id = ?", (member["user_id"],)) == 0


async def test_static_files_are_gzipped_for_clients_that_accept_it(node):
    import gzip
    from pathlib import Path

    raw = (Path(__file__).resolve().parent.parent / "service/http/static/htmx-2.0.11.min.js").read_bytes()
    r = await node.client.get("/static/htmx-2.0.11.min.js", headers={"Accept-Encoding": "gzip, br"})
    body = await r.get_data()
    assert r.headers["Content-Encoding"] == "gzip" and len(body) < len(raw) // 2
    assert gzip.decompress(body) == raw
    r2 = await node.client.get("/static/htmx-2.0.11.min.js", headers={"Accept-Encoding": "gzip",
                                                                     "If-None-Match": r.headers["ETag"]})
    assert r2.status_code == 304


def page_permission(app, endpoint: str):
    """The `@page(permission)` of a view (through the other decorators' functools.wraps)."""
    func = app.view_functions[endpoint]
    while func is not None:
        if hasattr(func, "permission"):
            return func.permission
        func = getattr(func, "__wrapped__", None)
    raise AssertionError(f"{endpoint} is not a @page view")


@pytest.mark.parametrize("role", ["owner", "admin", "member", "read_only"])
async def test_every_dashboard_route_checks_the_role_table(node, role):
    """Every dashboard route, for every role: allowed by the API's role table -> not 403;
    otherwise the 403 page "Your role (R) does not allow this." (GET pages and form posts)."""
    from service.roles import allows

    app = node.app
    await logged_in(node, role=role)
    _, html = await page(node.client, "/support")
    token = csrf(html)
    rules = [r for r in app.url_map.iter_rules() if r.endpoint.startswith("dash_") and "static" not in r.endpoint]
    assert len(rules) > 40
    for rule in rules:
        permission = page_permission(app, rule.endpoint)
        path = rule.rule
        for arg in rule.arguments:
            path = path.replace(f"<{arg}>", "00000000-0000-0000-0000-000000000000")
        allowed = permission is None or allows(role, permission)
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            if method == "GET" and path.endswith("/events") and not rule.arguments and allowed:
                continue  # an open stream: its start is tested elsewhere
            if method == "GET":
                r = await node.client.get(path, headers=HTML)
            else:
                r = await node.client.post(path if "upload" not in path else f"{path}?csrf_token={token}",
                                           form={"csrf_token": token})
            text = await r.get_data(as_text=True)
            if allowed:
                assert r.status_code != 403 or "does not allow" not in text, (role, method, path)
            else:
                assert r.status_code == 403, (role, method, path, r.status_code)
                assert f"Your role ({role}) does not allow this." in text, (role, method, path)


def test_usage_chart_stacks_the_four_largest_projects_then_other():
    from datetime import UTC, datetime

    from service.http.routes.dash_billing import chart

    today = datetime(2026, 3, 10, tzinfo=UTC)
    rows = [{"project_id": f"p{i}", "day": "2026-03-10", "credits": f"{i + 1}.00", "jobs": 1} for i in range(6)]
    rows.append({"project_id": "p5", "day": "2025-01-01", "credits": "50.00", "jobs": 1})  # outside 90 days
    names = {f"p{i}": f"Project {i}" for i in range(6)}
    c = chart(rows, today, names)
    assert [(l["name"], l["credits"]) for l in c["legend"]] == [
        ("Project 5", "56.00"), ("Project 4", "5.00"), ("Project 3", "4.00"), ("Project 2", "3.00"), ("Other", "3.00")]
    day = [b for b in c["bars"] if b["day"] == "2026-03-10"]
    assert [b["credits"] for b in day] == ["6.00", "5.00", "4.00", "3.00", "3.00"]
    assert c["top"] == "21.00" and c["total"] == "21.00"
    assert abs(day[-1]["y"]) < 1e-9  # the day's stack reaches the top of the chart
    assert c["first"] == "2025-12-11" and c["last"] == "2026-03-10"


async def test_settings_rename_checks_the_name(node):
    org = await logged_in(node)
    _, html = await page(node.client, "/settings")
    assert "Sign-up on this node</dt><dd>open" in html and "approved on" in html
    r = await node.client.post("/settings", form={"csrf_token": csrf(html), "name": "   "})
    assert r.status_code == 422 and "name must be 1 to 200 characters." in await r.get_data(as_text=True)
    r = await node.client.post("/settings", form={"csrf_token": csrf(html), "name": "x" * 201})
    assert r.status_code == 422
    r = await node.client.post("/settings", form={"csrf_token": csrf(html), "name": " New Name "})
    assert r.status_code == 303
    assert node.store.scalar("SELECT name FROM organizations WHERE id = ?", (org["organization_id"],)) == "New Name"


async def test_the_chosen_project_scopes_studio_and_falls_back_to_default_when_archived(node):
    org = await logged_in(node)
    _, html = await page(node.client, "/projects")
    r = await node.client.post("/projects", form={"csrf_token": csrf(html), "name": "Campaign"})
    assert r.status_code == 303 and "gs_project=" in r.headers["Set-Cookie"]
    campaign = node.store.one("SELECT id FROM projects WHERE name = 'Campaign'")["id"]
    _, html = await page(node.client, "/studio")
    assert "run in project <strong>Campaign</strong>" in html
    r = await node.client.post("/studio", form={"csrf_token": csrf(html), "prompt": "a fox"})
    job_id = r.headers["Location"].rsplit("/", 1)[1]
    assert node.store.scalar("SELECT project_id FROM jobs WHERE id = ?", (job_id,)) == campaign
    r = await node.client.post(f"/projects/{campaign}/archive", form={"csrf_token": csrf(html)})
    assert r.status_code == 303
    _, html = await page(node.client, "/studio")
    assert "run in project <strong>Default</strong>" in html
    # a project id of another organization is ignored by the switcher
    other = await node.create_org(name="Other", email="boss@other.test")
    r = await node.call("GET", "/v1/projects", other["api_key"])
    foreign = (await r.get_json())["data"][0]["id"]
    r = await node.client.post("/projects/switch", form={"csrf_token": csrf(html), "project": foreign,
                                                        "next": "/studio"})
    assert r.status_code == 303 and "gs_project" not in r.headers.get("Set-Cookie", "")
    assert org["organization_id"] != other["organization_id"]


async def test_a_page_stream_ends_at_the_next_check_after_logout(node, autojump_clock):
    from sse_client import open_stream

    org = await logged_in(node)
    _, html = await page(node.client, "/studio")
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", org["api_key"],
                        json={"prompt": "a hill [[delay:3600]]"})
    rid = (await r.get_json())["request_id"]
    _, html = await page(node.client, "/studio")
    cookie = next(c for c in node.client.cookie_jar if c.name == "gs_session")
    async with open_stream(node, f"/studio/jobs/{rid}/events", None,
                           headers={"Cookie": f"gs_session={cookie.value}"}) as s:
        first = await s.next()
        assert first["event"] == "status" and first["data"]["status"] in ("queued", "rendering")
        started = trio.current_time()
        r = await node.client.post("/logout", form={"csrf_token": csrf(html)})
        assert r.status_code == 303
        while (f := await s.next()) is not None:
            last = f
        assert last == {"comment": "access ended"}
        assert trio.current_time() - started <= 30.01


async def test_history_pages_with_the_feed_cursor_and_filters_by_source(node):
    import html as html_lib
    import re

    org = await logged_in(node)
    for i in range(27):
        r = await node.call("POST", "/v1/generation/capabilities/image.generate", org["api_key"],
                            json={"prompt": f"job {i} [[delay:3600]]"})
        assert r.status_code == 202
    _, body = await page(node.client, "/history")
    assert body.count("<tr data-id=") == 25 and "27 in project Default." in body
    older = html_lib.unescape(re.search(r'href="(/history\?[^"]*cursor=[^"]+)">Older', body).group(1))
    _, body = await page(node.client, older)
    assert body.count("<tr data-id=") == 2 and "data-follow" not in body  # an older page is not live
    r = await node.client.get("/history?cursor=c1.bogus.bogus", headers=HTML)
    assert r.status_code == 422 and "Invalid cursor" in await r.get_data(as_text=True)
    r = await node.client.get("/history?source=nope", headers=HTML)
    assert r.status_code == 400 and "source must be one of api, studio, workflow." in await r.get_data(as_text=True)
    _, body = await page(node.client, "/history?source=studio")
    assert "0 in project Default from studio." in body
