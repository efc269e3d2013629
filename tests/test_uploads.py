"""POST /v1/generation/uploads: each accepted type, bad / mismatched / oversized files, the
multipart rules, project scoping, and that a failed upload leaves nothing behind."""

from __future__ import annotations

import hashlib

import pytest

from service.storage import generation as gsql
from test_generation_support import (
    UPLOADS, asset_files, leftovers, local, multipart, running_node, upload, upload_ok,
)
from test_media_samples import image_bytes, wav_bytes, write_mp3, write_mp4
from conftest import err

MiB = 1024 * 1024
ALLOWED = ["image/png", "image/jpeg", "image/webp", "video/mp4", "audio/mpeg", "audio/wav"]


def nothing_left(node, tmp_path) -> None:
    assert leftovers(tmp_path) == []
    assert node.store.one("SELECT COUNT(*) AS n FROM assets")["n"] == 0
    assert asset_files(tmp_path) == []


async def samples(tmp_path) -> dict[str, tuple[bytes, dict]]:
    mp4 = write_mp4(tmp_path / "s.mp4", [(230, 20, 20)] * 24, size=(64, 48)).read_bytes()
    mp3 = write_mp3(tmp_path / "s.mp3", seconds=1.0).read_bytes()
    return {
        "image/png": (image_bytes("PNG", 64, 48), {"kind": "image", "width": 64, "height": 48, "duration_s": None}),
        "image/jpeg": (image_bytes("JPEG", 40, 30), {"kind": "image", "width": 40, "height": 30, "duration_s": None}),
        "image/webp": (image_bytes("WEBP", 32, 16), {"kind": "image", "width": 32, "height": 16, "duration_s": None}),
        "video/mp4": (mp4, {"kind": "video", "width": 64, "height": 48, "duration_s": 1.0}),
        "audio/mpeg": (mp3, {"kind": "audio", "width": None, "height": None}),
        "audio/wav": (wav_bytes(0.5), {"kind": "audio", "width": None, "height": None, "duration_s": 0.5}),
    }


async def test_each_accepted_type(node, org, tmp_path):
    key = org["api_key"]
    for ctype, (data, expect) in (await samples(tmp_path / "..")).items():
        asset = await upload_ok(node, key, data, ctype=ctype)
        for field, value in expect.items():
            assert asset[field] == value, (ctype, field, asset)
        assert asset["content_type"] == ctype
        assert asset["size_bytes"] == len(data)
        assert asset["sha256"] == hashlib.sha256(data).hexdigest()
        assert (asset["project_id"], asset["job_id"], asset["source"]) == (org["default_project_id"], None, "upload")
        assert asset["url"] == f"http://testserver/v1/generation/assets/{asset['id']}/content"
        if ctype == "audio/mpeg":
            assert 0.9 < asset["duration_s"] < 1.2
        r = await node.call("GET", f"/v1/generation/assets/{asset['id']}", key)
        assert (await r.get_json())["data"] == asset
        r = await node.call("GET", local(asset["url"]), key)
        assert r.status_code == 302
        r = await node.client.get(local(r.headers["Location"]))
        assert r.status_code == 200
        assert r.headers["Content-Type"] == ctype
        assert await r.get_data() == data
    assert leftovers(tmp_path) == []


async def test_declared_type_missing_or_generic_is_sniffed(node, org):
    for ctype in (None, "application/octet-stream"):
        asset = await upload_ok(node, org["api_key"], image_bytes("PNG"), ctype=ctype)
        assert asset["content_type"] == "image/png"


BAD = [
    (b"hello, world", "text/plain", "Unsupported content type 'text/plain'.", {"allowed": ALLOWED}),
    (b"hello, world", None, "Unsupported content type 'application/octet-stream'.", {"allowed": ALLOWED}),
    (b"GIF89a" + b"\0" * 40, "image/gif", "Unsupported content type 'image/gif'.", {"allowed": ALLOWED}),
    (image_bytes("JPEG"), "image/png", "File is not a readable image.", None),
    (image_bytes("PNG")[:60], "image/png", "File is not a readable image.", None),
    (image_bytes("PNG"), "video/mp4", "Unsupported content type 'video/mp4'.", {"allowed": ALLOWED}),
    (b"", "image/png", "File is not a readable image.", None),
    (b"", None, "Unsupported content type 'application/octet-stream'.", {"allowed": ALLOWED}),
    (b"\0\0\0\x18ftypisom\0\0\x02\0isomiso2" + b"\0" * 64, "video/mp4", "File is not a readable video.", None),
    (wav_bytes(0.5)[:44], "audio/wav", "File is not a readable audio file.", None),
    (b"ID3\x04\0\0\0\0\0\0" + b"\0" * 64, "audio/mpeg", "File is not a readable audio file.", None),
]


@pytest.mark.parametrize("data,ctype,message,details", BAD, ids=[
    "text", "text-undeclared", "gif", "jpeg-as-png", "truncated-png", "png-as-mp4", "empty-png", "empty",
    "broken-mp4", "wav-header-only", "mp3-tag-only"])
async def test_bad_and_mismatched_files(node, org, tmp_path, data, ctype, message, details):
    r = await upload(node, org["api_key"], data, ctype=ctype)
    assert r.status_code == 422
    want = {"code": "request.validation_failed", "message": message}
    if details is not None:
        want["details"] = details
    assert err(await r.get_json()) == want
    nothing_left(node, tmp_path)


async def test_file_over_50_mib_is_422_and_body_over_51_mib_is_413(node, org, tmp_path):
    key = org["api_key"]
    png = image_bytes("PNG")
    r = await upload(node, key, png + b"\0" * (50 * MiB + 1 - len(png)))
    assert r.status_code == 422
    assert err(await r.get_json()) == {"code": "request.validation_failed", "message": "File exceeds 50 MiB.",
                                       "details": {"max_bytes": 50 * MiB}}
    nothing_left(node, tmp_path)
    r = await upload(node, key, b"\0" * (51 * MiB + 1))
    assert r.status_code == 413
    assert err(await r.get_json()) == {"code": "request.bad_request", "message": "The request body is too large.",
                                       "details": {"max_bytes": 51 * MiB}}
    assert r.headers.get("Connection") == "close"
    nothing_left(node, tmp_path)
    # exactly 50 MiB is accepted (a PNG followed by padding the decoder ignores)
    asset = await upload_ok(node, key, png + b"\0" * (50 * MiB - len(png)))
    assert (asset["kind"], asset["size_bytes"]) == ("image", 50 * MiB)


async def test_multipart_rules(node, org, tmp_path):
    key = org["api_key"]
    png = image_bytes("PNG")

    async def post(parts, ctype=None):
        body, content_type = multipart(parts)
        return await node.call("POST", UPLOADS, key, data=body, headers={"Content-Type": ctype or content_type})

    async def check(r, errors):
        got = await r.get_json()
        assert r.status_code == 400, got
        assert err(got) == {"code": "request.validation_failed", "message": "The request failed validation.",
                            "details": {"errors": errors}}

    await check(await post([("project_id", "default")]),
                [{"message": "Field required", "key": "file", "source": "body"}])
    await check(await post([("file", "a.png", "image/png", png), ("name", "x")]),
                [{"message": "Object contains unknown field", "key": "name", "source": "body"}])
    await check(await post([("file", "a.png", "image/png", png), ("file", "b.png", "image/png", png)]),
                [{"message": "Only one file may be sent.", "key": "file", "source": "body"}])
    await check(await post([("file", "not a file")]),
                [{"message": "file must be a file part.", "key": "file", "source": "body"}])
    await check(await post([("file", "a.png", "image/png", png), ("project_id", "p.txt", "text/plain", b"x")]),
                [{"message": "project_id must be a text field.", "key": "project_id", "source": "body"}])
    await check(await post([("file", "a.png", "image/png", png), ("project_id", "x" * 201)]),
                [{"message": "project_id must be at most 200 characters.", "key": "project_id", "source": "body"}])
    r = await node.call("POST", UPLOADS, key, json={"file": "abc"})
    assert r.status_code == 400
    assert err(await r.get_json()) == {
        "code": "request.bad_request",
        "message": "The upload must be multipart/form-data with the file in the field 'file'."}
    body, content_type = multipart([("file", "a.png", "image/png", png)])
    r = await node.call("POST", UPLOADS, key, data=body[:-30], headers={"Content-Type": content_type})
    assert r.status_code == 400
    assert err(await r.get_json()) == {"code": "request.bad_request",
                                       "message": "The request body is not valid multipart/form-data."}
    r = await node.call("POST", UPLOADS, key, data=body, headers={"Content-Type": "multipart/form-data"})
    assert r.status_code == 400
    nothing_left(node, tmp_path)


async def test_project_scoping(node, org, tmp_path):
    key = org["api_key"]
    png = image_bytes("PNG")
    r = await node.call("POST", "/v1/projects", key, json={"name": "Art"})
    art = (await r.get_json())["data"]
    assert (await upload_ok(node, key, png, fields=[("project_id", "art")]))["project_id"] == art["id"]
    assert (await upload_ok(node, key, png, headers={"X-Service-Project": art["id"]}))["project_id"] == art["id"]
    # the field wins over the header
    assert (await upload_ok(node, key, png, fields=[("project_id", "default")],
                            headers={"X-Service-Project": "art"}))["project_id"] == org["default_project_id"]
    r = await upload(node, key, png, fields=[("project_id", "nope")])
    assert r.status_code == 404
    await node.call("POST", f"/v1/projects/{art['id']}/archive", key)
    r = await upload(node, key, png, fields=[("project_id", "art")])
    assert r.status_code == 409
    assert err(await r.get_json()) == {"code": "request.conflict", "message": "The project is archived.",
                                       "details": {"project_id": art["id"]}}
    assert leftovers(tmp_path) == []
    # the archived project's assets stay readable
    r = await node.call("GET", "/v1/generation/assets", key, headers={"X-Service-Project": "art"})
    assert len((await r.get_json())["data"]) == 2


async def test_same_bytes_twice_two_assets_one_file(node, org, tmp_path):
    png = image_bytes("PNG")
    a = await upload_ok(node, org["api_key"], png)
    b = await upload_ok(node, org["api_key"], png)
    assert a["id"] != b["id"] and a["sha256"] == b["sha256"]
    assert len(asset_files(tmp_path)) == 1


async def test_permissions(node, org):
    ro = await node.add_member(org["organization_id"], "read_only")
    r = await upload(node, ro["api_key"], image_bytes("PNG"))
    assert r.status_code == 403 and await r.get_json() == {"status": False, "error": "Forbidden"}
    r = await upload(node, None, image_bytes("PNG"))
    assert r.status_code == 401


async def test_restart_finishes_a_committed_upload_and_drops_the_rest(tmp_path):
    png = image_bytes("PNG", 20, 20)
    sha = hashlib.sha256(png).hexdigest()
    async with running_node(tmp_path, test_mode=True) as n1:
        org = await n1.create_org()
        # stopped between the row commit and the move: the row exists, the bytes are in tmp/
        row = {"id": "11111111-1111-4111-8111-111111111111", "organization_id": org["organization_id"],
               "project_id": org["default_project_id"], "job_id": None, "position": 0, "source": "upload",
               "kind": "image", "content_type": "image/png", "width": 20, "height": 20, "duration_s": None,
               "size_bytes": len(png), "sha256": sha, "created_at": "2026-01-01T00:00:00.000000Z"}
        await n1.store.write(lambda c: gsql.insert_asset(c, row))
        gen = n1.parts.generation
        gen.files.upload_temp(row["id"]).write_bytes(png)
        # stopped mid-upload: a temp file with no row
        gen.files.upload_temp("22222222-2222-4222-8222-222222222222").write_bytes(b"partial")
    async with running_node(tmp_path, test_mode=True) as n2:
        assert leftovers(tmp_path) == []
        assert n2.parts.generation.files.path(sha).read_bytes() == png
        r = await n2.call("GET", f"/v1/generation/assets/{row['id']}/content", org["api_key"])
        r = await n2.client.get(local(r.headers["Location"]))
        assert await r.get_data() == png


async def test_early_answers_close_the_connection(node, org):
    r = await upload(node, None, image_bytes("PNG"))
    assert r.status_code == 401 and r.headers.get("Connection") == "close"
    r = await upload(node, org["api_key"], image_bytes("PNG"))
    assert r.status_code == 201 and r.headers.get("Connection") is None
    r = await upload(node, org["api_key"], b"junk", ctype="text/plain")
    assert r.status_code == 422 and r.headers.get("Connection") is None


async def test_too_many_parts_is_a_bad_request(node, org, tmp_path):
    parts = [("file", "a.png", "image/png", image_bytes("PNG"))] + [(f"x{i}", "1") for i in range(70)]
    body, content_type = multipart(parts)
    r = await node.call("POST", UPLOADS, org["api_key"], data=body, headers={"Content-Type": content_type})
    assert r.status_code == 400
    assert err(await r.get_json())["message"] == "The request body is not valid multipart/form-data."
    parts = [("file", "a.png", "image/png", image_bytes("PNG"))] + [(f"x{i}", "1") for i in range(40)]
    body, content_type = multipart(parts)
    r = await node.call("POST", UPLOADS, org["api_key"], data=body, headers={"Content-Type": content_type})
    assert r.status_code == 400
    assert len(err(await r.get_json())["details"]["errors"]) == 20
    nothing_left(node, tmp_path)
