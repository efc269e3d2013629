"""At most UPLOADS_PER_ORG uploads of one organization in progress at once (the API's and
the dashboard's together): one more is 429 before its body is read, and a place comes back
however an upload ends (finished, refused, the client gone mid-body, the 120 s limit)."""

from __future__ import annotations

from contextlib import AsyncExitStack, asynccontextmanager

import trio

from service.http.routes import uploads as uploads_mod
from tests.pages import csrf, page
from tests.test_dashboard_http import logged_in
from test_generation_support import UPLOADS, multipart, upload
from test_media_samples import image_bytes
from waiting import wait_until

LIMIT = uploads_mod.UPLOADS_PER_ORG
MESSAGE = (f"Too many uploads in progress for this organization (at most {LIMIT} at once). "
           "Retry when one has finished.")
REFUSED = {"error": {"code": "request.rate_limited", "message": MESSAGE,
                     "details": {"uploads_in_progress_limit": LIMIT, "retry_after": 5}}}


def in_progress(node, org_id: str) -> int:
    slots = node.app.extensions.get("upload_slots")
    return slots.open[org_id] if slots is not None else 0


class Held:
    """An upload whose body is sent in parts, as the test says."""

    def __init__(self, conn, body: bytes) -> None:
        self.conn, self.body = conn, body

    async def finish(self):
        await self.conn.send(self.body[10:])
        await self.conn.send_complete()
        return await self.conn.as_response()


@asynccontextmanager
async def held(node, key: str, path: str = UPLOADS, fields=(), data: bytes | None = None):
    """An upload that has sent its headers and the first 10 bytes of its body."""
    body, ctype = multipart([*fields, ("file", "f.png", "image/png", data or image_bytes("PNG"))])
    headers = {"Content-Type": ctype}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    async with node.client.request(path, method="POST", headers=headers) as conn:
        await conn.send(body[:10])
        yield Held(conn, body)


async def fill(node, stack: AsyncExitStack, key: str, org_id: str, n: int = LIMIT) -> list[Held]:
    ups, base = [], in_progress(node, org_id)
    for i in range(n):
        ups.append(await stack.enter_async_context(held(node, key)))
        await wait_until(lambda: in_progress(node, org_id) == base + i + 1)
    return ups


async def refused(node, key: str) -> None:
    r = await upload(node, key, image_bytes("PNG"))
    body = await r.get_json()
    body["error"].pop("request_id")
    assert (r.status_code, body) == (429, REFUSED)
    assert (r.headers["Retry-After"], r.headers["Connection"]) == ("5", "close")


async def accepted(node, key: str) -> None:
    r = await upload(node, key, image_bytes("PNG"))
    assert r.status_code == 201, await r.get_json()


async def test_one_upload_past_the_cap_is_429_and_other_organizations_go_on(node, org):
    other = await node.create_org(email="other@acme.test")
    async with AsyncExitStack() as stack:
        ups = await fill(node, stack, org["api_key"], org["organization_id"])
        await refused(node, org["api_key"])
        assert in_progress(node, org["organization_id"]) == LIMIT  # the refused one took no place
        await accepted(node, other["api_key"])
        # finished: its place comes back, and one more is taken
        r = await ups[0].finish()
        assert r.status_code == 201
        assert in_progress(node, org["organization_id"]) == LIMIT - 1
        await accepted(node, org["api_key"])
        for up in ups[1:]:
            assert (await up.finish()).status_code == 201
    assert in_progress(node, org["organization_id"]) == 0
    assert node.store.scalar("SELECT count(*) FROM assets") == LIMIT + 2


async def test_a_refused_upload_gives_its_place_back(node, org):
    key, org_id = org["api_key"], org["organization_id"]
    async with AsyncExitStack() as stack:
        ups = await fill(node, stack, key, org_id, LIMIT - 1)
        for data in (b"hello, world", image_bytes("JPEG")):  # 422 type, 422 unreadable
            r = await upload(node, key, data, ctype="image/png" if data != b"hello, world" else "text/plain")
            assert r.status_code == 422
            assert in_progress(node, org_id) == LIMIT - 1
        r = await node.call("POST", UPLOADS, key, data=b"x", headers={"Content-Type": "text/plain"})
        assert r.status_code == 400
        bad = await stack.enter_async_context(held(node, key, data=b"hello, world"))
        await wait_until(lambda: in_progress(node, org_id) == LIMIT)
        await refused(node, key)
        r = await bad.finish()
        assert r.status_code == 422
        assert in_progress(node, org_id) == LIMIT - 1
        await accepted(node, key)
        for up in ups:
            await up.finish()
    assert in_progress(node, org_id) == 0


async def test_a_client_gone_mid_body_gives_its_place_back(node, org):
    key, org_id = org["api_key"], org["organization_id"]
    async with AsyncExitStack() as stack:
        ups = await fill(node, stack, key, org_id)
        await refused(node, key)
        await ups[-1].conn.disconnect()
        await wait_until(lambda: in_progress(node, org_id) == LIMIT - 1)
        ups[-1].conn._client_send.close()  # nothing was answered: the test client would wait for ever
        await accepted(node, key)
        for up in ups[:-1]:
            assert (await up.finish()).status_code == 201
    assert in_progress(node, org_id) == 0
    assert node.store.scalar("SELECT count(*) FROM assets") == LIMIT


async def test_an_upload_past_its_time_limit_gives_its_place_back(node, org, autojump_clock):
    key, org_id = org["api_key"], org["organization_id"]
    async with AsyncExitStack() as stack:
        ups = await fill(node, stack, key, org_id)
        await refused(node, key)
        await trio.sleep(121)  # every held upload passes the route's 120 s: 408 each
        assert in_progress(node, org_id) == 0
        for up in ups:
            r = await up.conn.as_response()
            assert r.status_code == 408
        up = await stack.enter_async_context(held(node, key))  # a place again (no 429)
        await wait_until(lambda: in_progress(node, org_id) == 1)
        await trio.sleep(121)
        assert ((await up.conn.as_response()).status_code, in_progress(node, org_id)) == (408, 0)


async def test_the_dashboard_upload_shares_the_cap(node):
    org = await logged_in(node)
    org_id = org["organization_id"]
    _, html = await page(node.client, "/assets")
    token = csrf(html)
    async with AsyncExitStack() as stack:
        ups = [await stack.enter_async_context(held(node, "", "/assets/upload", [("csrf_token", token)]))]
        await wait_until(lambda: in_progress(node, org_id) == 1)
        ups += await fill(node, stack, org["api_key"], org_id, LIMIT - 1)
        assert in_progress(node, org_id) == LIMIT
        await refused(node, org["api_key"])
        body, ctype = multipart([("csrf_token", token), ("file", "s.png", "image/png", image_bytes("PNG"))])
        r = await node.client.post("/assets/upload", data=body, headers={"Content-Type": ctype})
        assert (r.status_code, r.headers["Connection"]) == (429, "close")
        assert MESSAGE in await r.get_data(as_text=True)
        r = await ups[0].finish()
        assert r.status_code == 303
        assert in_progress(node, org_id) == LIMIT - 1
        for up in ups[1:]:
            await up.finish()
    assert in_progress(node, org_id) == 0

