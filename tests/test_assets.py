"""Assets: list and read, content redirect, signed URLs (lifetime on trio's mock clock,
tampering, far-future `exp`, headers, ranges), generated assets, organization isolation."""

from __future__ import annotations

import hashlib
import math
import os
import stat
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import trio

from service.assets.signing import SECRET_FILE
from service.storage import generation as gsql
from test_generation_support import local, running_node, submit, upload_ok, wait_status
from test_media_samples import image_bytes
from conftest import err


async def signed_url(node, key: str, asset_id: str) -> str:
    r = await node.call("GET", f"/v1/generation/assets/{asset_id}/url", key)
    assert r.status_code == 200
    data = (await r.get_json())["data"]
    assert data["expires_in"] == 900 and set(data) == {"url", "expires_in"}
    return data["url"]


def with_query(url: str, **changes) -> str:
    parts = urlsplit(url)
    q = {k: v[0] for k, v in parse_qs(parts.query).items()}
    q.update(changes)
    q = {k: v for k, v in q.items() if v is not None}
    return f"{parts.path}?{urlencode(q)}"


FORBIDDEN = {"code": "auth.forbidden", "message": "This link is invalid or has expired."}


async def test_list_read_content_and_url(node, org):
    key = org["api_key"]
    a = await upload_ok(node, key, image_bytes("PNG", 10, 10))
    b = await upload_ok(node, key, image_bytes("JPEG", 12, 12), ctype="image/jpeg")
    r = await node.call("GET", "/v1/generation/assets", key)
    assert [x["id"] for x in (await r.get_json())["data"]] == [b["id"], a["id"]]
    r = await node.call("GET", "/v1/generation/assets?limit=1", key)
    assert [x["id"] for x in (await r.get_json())["data"]] == [b["id"]]
    r = await node.call("GET", f"/v1/generation/assets/{a['id']}", key)
    assert (await r.get_json())["data"] == a
    r = await node.call("GET", f"/v1/generation/assets/{a['id']}/content", key)
    assert r.status_code == 302
    url = r.headers["Location"]
    assert url.startswith(f"http://testserver/files/{a['id']}?exp=")
    assert set(parse_qs(urlsplit(url).query)) == {"exp", "sig"}
    assert int(parse_qs(urlsplit(url).query)["exp"][0]) == math.floor(node.clock.now()) + 900
    r = await node.client.get(local(url))
    assert r.status_code == 200
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["Content-Type"] == "image/png"
    assert await r.get_data() == image_bytes("PNG", 10, 10)
    r = await node.client.get(local(await signed_url(node, key, b["id"])), headers={"Range": "bytes=0-9"})
    assert r.status_code == 206
    assert await r.get_data() == image_bytes("JPEG", 12, 12)[:10]


async def test_reads_cross_projects_but_not_organizations(node, org):
    key = org["api_key"]
    r = await node.call("POST", "/v1/projects", key, json={"name": "Two"})
    two = (await r.get_json())["data"]
    a = await upload_ok(node, key, image_bytes("PNG"), fields=[("project_id", two["id"])])
    r = await node.call("GET", f"/v1/generation/assets/{a['id']}", key)  # default project resolved, still found
    assert r.status_code == 200
    r = await node.call("GET", "/v1/generation/assets", key)
    assert (await r.get_json())["data"] == []
    r = await node.call("GET", f"/v1/generation/assets?project_id={two['slug']}", key)
    assert len((await r.get_json())["data"]) == 1
    stranger = await node.create_org(name="Else", email="o@else.test")
    for suffix in ("", "/content", "/url"):
        r = await node.call("GET", f"/v1/generation/assets/{a['id']}{suffix}", stranger["api_key"])
        assert r.status_code == 404
        assert err(await r.get_json()) == {"code": "request.not_found", "message": "Asset not found."}
    r = await node.call("GET", "/v1/generation/assets/nope", key)
    assert r.status_code == 404


async def test_tampered_links_are_refused(node, org):
    key = org["api_key"]
    a = await upload_ok(node, key, image_bytes("PNG"))
    b = await upload_ok(node, key, image_bytes("PNG", 8, 8))
    url = await signed_url(node, key, a["id"])
    q = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    sig, exp = q["sig"], q["exp"]
    flipped = ("0" if sig[0] != "0" else "1") + sig[1:]
    bad = [
        with_query(url, sig=flipped),
        with_query(url, sig=sig.upper()),
        with_query(url, sig=sig[:-2]),
        with_query(url, sig=None),
        with_query(url, exp=str(int(exp) - 1)),
        with_query(url, exp=str(int(exp) + 1)),
        with_query(url, exp=exp + ".0"),
        with_query(url, exp="-5"),
        with_query(url, exp=None),
        with_query(url, exp="9" * 40),
        local(url).replace(a["id"], b["id"]),
        f"/files/{a['id']}",
    ]
    for path in bad:
        r = await node.client.get(path)
        assert r.status_code == 403, path
        assert err(await r.get_json()) == FORBIDDEN
    # a correctly signed exp more than 900 s ahead was never issued by this node: refused
    signer = node.parts.generation.signer
    far = math.floor(node.clock.now()) + 901
    r = await node.client.get(f"/files/{a['id']}?exp={far}&sig={signer._sig(a['id'], far)}")
    assert r.status_code == 403
    near = math.floor(node.clock.now()) + 899
    r = await node.client.get(f"/files/{a['id']}?exp={near}&sig={signer._sig(a['id'], near)}")
    assert r.status_code == 200
    # a valid link to an asset that does not exist
    ghost = "33333333-3333-4333-8333-333333333333"
    r = await node.client.get(f"/files/{ghost}?exp={near}&sig={signer._sig(ghost, near)}")
    assert r.status_code == 404


async def test_signed_url_lifetime_on_the_mock_clock(node, org, autojump_clock):
    """Valid at 0 and 899 s after issue, refused at 900 s. Asset created without threads;
    autojump is paused while a file is read (a worker thread counts as idle time)."""
    key = org["api_key"]
    gen = node.parts.generation
    data = image_bytes("PNG", 9, 9)
    sha = hashlib.sha256(data).hexdigest()
    path = gen.files.path(sha)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    row = {"id": "44444444-4444-4444-8444-444444444444", "organization_id": org["organization_id"],
           "project_id": org["default_project_id"], "job_id": None, "position": 0, "source": "upload",
           "kind": "image", "content_type": "image/png", "width": 9, "height": 9, "duration_s": None,
           "size_bytes": len(data), "sha256": sha, "created_at": node.clock.iso_now()}
    await node.store.write(lambda c: gsql.insert_asset(c, row))

    async def fetch(url):
        autojump_clock.autojump_threshold = math.inf
        try:
            return await node.client.get(local(url))
        finally:
            autojump_clock.autojump_threshold = 0

    issued = trio.current_time()
    url = await signed_url(node, key, row["id"])
    assert trio.current_time() == issued
    r = await fetch(url)
    assert r.status_code == 200 and await r.get_data() == data
    await trio.sleep_until(issued + 899)
    r = await fetch(url)
    assert r.status_code == 200
    await trio.sleep_until(issued + 900)
    r = await fetch(url)
    assert r.status_code == 403 and err(await r.get_json()) == FORBIDDEN
    # a fresh link works again, and so does the content redirect
    r = await node.call("GET", f"/v1/generation/assets/{row['id']}/content", key)
    assert (await fetch(r.headers["Location"])).status_code == 200


async def test_test_clock_moves_link_expiry(node, org):
    a = await upload_ok(node, org["api_key"], image_bytes("PNG"))
    url = await signed_url(node, org["api_key"], a["id"])
    r = await node.op("POST", "/test/clock", {"advance_seconds": 900})
    assert r.status_code == 200
    r = await node.client.get(local(url))
    assert r.status_code == 403


async def test_secret_is_0600_and_links_survive_a_restart(tmp_path):
    async with running_node(tmp_path, test_mode=True) as n1:
        org = await n1.create_org()
        a = await upload_ok(n1, org["api_key"], image_bytes("PNG"))
        url = await signed_url(n1, org["api_key"], a["id"])
    mode = stat.S_IMODE(os.stat(tmp_path / SECRET_FILE).st_mode)
    assert mode == 0o600
    async with running_node(tmp_path, test_mode=True) as n2:
        r = await n2.client.get(local(url))
        assert r.status_code == 200


async def test_generated_asset_record(node, org):
    key = org["api_key"]
    rid = (await submit(node, key, {"prompt": "sky", "aspect_ratio": "9:16"}))["request_id"]
    st = await wait_status(node, key, rid)
    out = st["outputs"][0]
    r = await node.call("GET", f"/v1/generation/assets/{out['id']}", key)
    asset = (await r.get_json())["data"]
    assert {k: asset[k] for k in out} == out
    assert (asset["kind"], asset["job_id"], asset["source"], asset["project_id"]) == (
        "image", rid, "generation", org["default_project_id"])
    assert (asset["width"], asset["height"]) == (576, 1024)
    r = await node.call("GET", local(out["url"]), key)
    body = await (await node.client.get(local(r.headers["Location"]))).get_data()
    assert hashlib.sha256(body).hexdigest() == asset["sha256"] and len(body) == asset["size_bytes"]


async def test_validators_are_the_assets_own_not_the_shared_files(node, org):
    """The same bytes stored by two organizations share one file on disk; the second
    organization's fresh upload must not show the first one's time (Last-Modified) or a
    shared validator (ETag)."""
    other = await node.create_org(name="Other", email="o@other.test")
    png = image_bytes("PNG", 10, 10)
    first = await upload_ok(node, org["api_key"], png)
    assert (await node.op("POST", "/test/clock", {"advance_seconds": 3600})).status_code == 200
    second = await upload_ok(node, other["api_key"], png)
    assert first["sha256"] == second["sha256"]
    r1 = await node.client.get(local(await signed_url(node, org["api_key"], first["id"])))
    r2 = await node.client.get(local(await signed_url(node, other["api_key"], second["id"])))
    assert r1.headers["ETag"] == f'"{first["id"]}"' and r2.headers["ETag"] == f'"{second["id"]}"'
    assert r1.headers["Last-Modified"] != r2.headers["Last-Modified"]
    created = gsql.get_asset(node.store, second["id"])["created_at"]
    from email.utils import parsedate_to_datetime
    from service.clock import parse_iso
    assert parsedate_to_datetime(r2.headers["Last-Modified"]).timestamp() == math.floor(parse_iso(created))
    r = await node.client.get(local(await signed_url(node, other["api_key"], second["id"])),
                              headers={"If-None-Match": r2.headers["ETag"]})
    assert r.status_code == 304
    r = await node.client.get(local(await signed_url(node, other["api_key"], second["id"])),
                              headers={"If-None-Match": r1.headers["ETag"]})
    assert r.status_code == 200  # the other organization's validator matches nothing here
