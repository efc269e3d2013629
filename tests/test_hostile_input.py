"""Hostile input (reliability.md S6, §6.9 corpora; spec "Errors", "Limits"): what an attacker
can put in a request body never costs the node more than a bounded amount of memory or time,
and never answers 500.

In process (the `node` fixture): pixel bombs, images just over the pixel limit, declared
types that lie, foreign image formats under an image name, a polyglot served back, hostile
JSON (deep, huge, not UTF-8, lone surrogates, NUL), malformed multipart.

Against a real `genservice serve` subprocess (where the body path and memory matter): the
51 MiB + 1 byte body refused from its declared length before it is read (the answer arrives
while the client is still sending, the connection is closed, server RSS barely moves), the
same body without a declared length, 50 MiB + 1 byte -> 422, pixel bombs refused with a
bounded peak RSS (not decoded), and JSON bodies over 1 MiB. Times are printed, not bounded.
Memory is the server's VmRSS / VmHWM from /proc/<pid>/status, with its media-check
workers'; the peak is reset before each hostile request (/proc/<pid>/clear_refs), so the
figure is the growth caused by that request alone.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import struct
import subprocess
import threading
import time
import zlib
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from PIL import Image

from serve_process import HARNESS_ENV, ServeProcess
from service.config import Settings
from service.main import hypercorn_config
from service.media.inspect import MAX_PIXELS
from proc_memory import reset_peaks, total_kib
from test_generation_support import UPLOADS, leftovers, local, multipart, upload
from test_media_samples import fits_bytes, image_bytes, jpeg_with_size, png_header_only, webp_vp8x_header
from conftest import err
from waiting import wait_until_sync

MiB = 1024 * 1024
ALLOWED = ["image/png", "image/jpeg", "image/webp", "video/mp4", "audio/mpeg", "audio/wav"]
NOT_IMAGE = "File is not a readable image."
KEEP_ALIVE_S = hypercorn_config(Settings(data_dir=Path("unused"))).keep_alive_timeout  # the server's idle timeout


async def refused_422(node, key, data, ctype, message, details=None, filename="f.bin"):
    r = await upload(node, key, data, ctype=ctype, filename=filename)
    body = await r.get_json()
    assert r.status_code == 422, body
    want = {"code": "request.validation_failed", "message": message}
    if details is not None:
        want["details"] = details
    assert err(body) == want


# -- hostile files -------------------------------------------------------------------------------
def png_bomb(width: int, height: int) -> bytes:
    """A *valid* PNG that declares width x height, with a real (highly compressed) IDAT of the
    first rows: the decoder would allocate the whole canvas before finding the data short."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    row = b"\0" + b"\0" * ((width + 7) // 8)  # filter byte + one bit per pixel (mode 1)
    idat = zlib.compress(row * 64, 9)
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


BOMBS = {
    # name: (bytes, declared type); each declares >= 900 megapixels in a tiny file
    "png-header-only-30k": (png_header_only(30_000, 30_000), "image/png"),
    "png-header-only-max": (png_header_only(2**31 - 1, 2**31 - 1), "image/png"),
    "png-1bit-with-idat-60k": (png_bomb(60_000, 60_000), "image/png"),
    "png-wide-strip": (png_header_only(1_000_000_000, 1), "image/png"),
    "jpeg-sof-30k": (jpeg_with_size(30_000, 30_000), "image/jpeg"),
    "jpeg-sof-65535": (jpeg_with_size(65_535, 65_535), "image/jpeg"),
    "webp-vp8x-30k": (webp_vp8x_header(30_000, 30_000), "image/webp"),
    "webp-vp8x-16m": (webp_vp8x_header(2**24, 2**24), "image/webp"),
}


@pytest.fixture
def decodes(monkeypatch) -> list:
    """Every pixel decode Pillow starts (any thread): a refusal from the header alone leaves
    it empty. How long refusals take is measured by bench/hostile_json.py, not asserted here."""
    calls: list = []
    real = Image.Image.load

    def load(self, *a, **kw):
        calls.append(self.size)
        return real(self, *a, **kw)

    monkeypatch.setattr(Image.Image, "load", load)
    return calls


@pytest.mark.parametrize("name", list(BOMBS))
async def test_pixel_bombs_are_refused_fast(node, org, tmp_path, name, decodes):
    data, ctype = BOMBS[name]
    assert len(data) < 200_000
    await refused_422(node, org["api_key"], data, ctype, NOT_IMAGE)
    assert decodes == []  # refused from the header: no pixel was decoded
    assert leftovers(tmp_path) == []


def bilevel_png(width: int, height: int) -> bytes:
    """A real, fully decodable black-and-white PNG: small on disk, `width*height` pixels."""
    buf = io.BytesIO()
    Image.new("1", (width, height)).save(buf, "PNG", optimize=True)
    return buf.getvalue()


@pytest.mark.parametrize("width,height", [
    (8_000, 5_001),    # limit + 8,000 pixels
    (8_000, 6_000),    # 1.2 x the limit
    (10_000, 7_999),   # 2 x the limit, just under
    (10_000, 9_000),   # 90 MP: over Pillow's own DecompressionBombWarning line (89.5 MP) too
])
async def test_images_between_one_and_two_times_the_limit_are_refused(node, org, width, height, decodes):
    assert MAX_PIXELS < width * height < 2.3 * MAX_PIXELS
    data = bilevel_png(width, height)
    assert len(data) < 200_000
    decodes.clear()  # writing the test image decoded it
    await refused_422(node, org["api_key"], data, "image/png", NOT_IMAGE)
    assert decodes == []  # refused from the header, nothing decoded


async def test_an_image_exactly_at_the_limit_is_accepted(node, org):
    data = bilevel_png(8_000, 5_000)
    r = await upload(node, org["api_key"], data, ctype="image/png")
    body = await r.get_json()
    assert r.status_code == 201, body
    assert (body["data"]["width"], body["data"]["height"]) == (8_000, 5_000)


def tiff_bytes() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 10, 10)).save(buf, "TIFF")
    return buf.getvalue()


def gif_bytes() -> bytes:
    buf = io.BytesIO()
    Image.new("P", (16, 16)).save(buf, "GIF")
    return buf.getvalue()


def bmp_bytes() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16)).save(buf, "BMP")
    return buf.getvalue()


FOREIGN = {
    "tiff": (tiff_bytes(), "image/tiff"),
    "tiff-bigendian": (b"MM\x00*" + b"\x00" * 60, "image/tiff"),
    "fits": (fits_bytes(), "image/fits"),
    "gif": (gif_bytes(), "image/gif"),
    "bmp": (bmp_bytes(), "image/bmp"),
    "svg": (b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>', "image/svg+xml"),
    "html": (b"<!doctype html><script>alert(1)</script>", "text/html"),
    "pdf": (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj<<>>endobj\n", "application/pdf"),
}


@pytest.mark.parametrize("name", list(FOREIGN))
@pytest.mark.parametrize("declared", ["image/png", "image/jpeg", "image/webp"])
async def test_foreign_bytes_under_an_image_name_are_not_readable_images(node, org, tmp_path, name, declared):
    data, _real = FOREIGN[name]
    await refused_422(node, org["api_key"], data, declared, NOT_IMAGE, filename="photo.png")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("name", list(FOREIGN))
async def test_foreign_bytes_with_their_own_or_no_type_are_unsupported(node, org, name):
    data, real = FOREIGN[name]
    await refused_422(node, org["api_key"], data, real, f"Unsupported content type '{real}'.",
                      {"allowed": ALLOWED}, filename="photo.png")
    await refused_422(node, org["api_key"], data, None, "Unsupported content type 'application/octet-stream'.",
                      {"allowed": ALLOWED}, filename="photo.png")


MISMATCHED = [
    # (bytes, declared, message, details)
    (image_bytes("JPEG"), "image/png", NOT_IMAGE, None),
    (image_bytes("PNG"), "image/jpeg", NOT_IMAGE, None),
    (image_bytes("PNG"), "image/webp", NOT_IMAGE, None),
    (image_bytes("WEBP"), "image/png", NOT_IMAGE, None),
    (image_bytes("PNG"), "audio/wav", "Unsupported content type 'audio/wav'.", {"allowed": ALLOWED}),
    (image_bytes("PNG"), "video/mp4", "Unsupported content type 'video/mp4'.", {"allowed": ALLOWED}),
    (image_bytes("JPEG"), "audio/mpeg", "Unsupported content type 'audio/mpeg'.", {"allowed": ALLOWED}),
    # a JPEG start glued to PNG bytes: sniffs as JPEG, does not decode
    (b"\xff\xd8\xff" + image_bytes("PNG"), "image/jpeg", NOT_IMAGE, None),
    # a PNG signature with a JPEG behind it
    (b"\x89PNG\r\n\x1a\n" + image_bytes("JPEG"), "image/png", NOT_IMAGE, None),
]


@pytest.mark.parametrize("data,declared,message,details", MISMATCHED,
                         ids=["jpeg-as-png", "png-as-jpeg", "png-as-webp", "webp-as-png", "png-as-wav",
                              "png-as-mp4", "jpeg-as-mp3", "jpeg-head-png-body", "png-head-jpeg-body"])
async def test_declared_type_differing_from_the_bytes(node, org, data, declared, message, details):
    await refused_422(node, org["api_key"], data, declared, message, details)


POLYGLOTS = {
    "png+html": (image_bytes("PNG") + b"<html><body><script>alert(document.cookie)</script></body></html>",
                 "image/png"),
    "png+js": (image_bytes("PNG") + b"\n/*/alert(1)//*/", "image/png"),
    "png-declared-html": (image_bytes("PNG") + b"<script>alert(1)</script>", "text/html"),
    "jpeg+html": (image_bytes("JPEG") + b"<html><script>alert(1)</script></html>", "image/jpeg"),
}


@pytest.mark.parametrize("name", list(POLYGLOTS))
async def test_polyglot_is_served_back_as_its_sniffed_type_with_nosniff(node, org, name):
    data, declared = POLYGLOTS[name]
    key = org["api_key"]
    r = await upload(node, key, data, ctype=declared, filename="x.html")
    body = await r.get_json()
    assert r.status_code == 201, body
    sniffed = "image/jpeg" if name.startswith("jpeg") else "image/png"
    assert body["data"]["content_type"] == sniffed
    r = await node.call("GET", f"/v1/generation/assets/{body['data']['id']}/content", key)
    assert r.status_code == 302
    r = await node.client.get(local(r.headers["Location"]))
    assert r.status_code == 200
    assert r.headers["Content-Type"] == sniffed
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["Content-Disposition"] == "inline"
    assert await r.get_data() == data  # stored and served as uploaded (no re-encoding policy)


# -- hostile JSON --------------------------------------------------------------------------------
def nested(depth: int, kind: str = "list") -> bytes:
    if kind == "list":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


def json_routes(org: dict) -> list[tuple[str, str, str]]:
    """(method, path, name of a field that takes any JSON or a string) on JSON routes."""
    return [
        ("POST", "/v1/projects", "name"),
        ("POST", "/v1/generation/capabilities/image.generate", "prompt"),
        ("POST", "/v1/generation/estimate", "prompt"),
        ("POST", "/v1/workflows/products/text-to-clip/runs", "inputs"),
        ("POST", "/v1/workflows/products/text-to-clip/estimate", "inputs"),
        ("POST", "/v1/webhooks", "description"),
        ("POST", "/v1/api-keys", "name"),
        ("PUT", "/v1/billing/settings", "low_balance_threshold"),
        ("POST", "/v1/support/tickets", "body"),
        ("PATCH", f"/v1/projects/{org['default_project_id']}", "description"),
        ("POST", "/operator/v1/organizations", "name"),
    ]


async def send_raw(node, key, method, path, data: bytes, ctype="application/json"):
    headers = {"Content-Type": ctype}
    if path.startswith("/operator/"):
        headers |= node.op_headers()
        key = None
    return await node.call(method, path, key, data=data, headers=headers)


def never_500(r, body) -> None:
    assert r.status_code < 500, (r.status_code, body)


async def test_deeply_nested_json_is_a_bad_request_everywhere(node, org):
    key = org["api_key"]
    for method, path, field in json_routes(org):
        for raw in (nested(100_000), nested(100_000, "object")):
            r = await send_raw(node, key, method, path, raw)
            body = await r.get_json()
            assert r.status_code == 400, (path, body)
            assert err(body) == {"code": "request.bad_request", "message": "The request body is not valid JSON."}
        # inside a field, at depths around the interpreter's recursion limit
        for depth in (100_000, 5_000, 990, 900, 700, 400, 100):
            for kind in ("list", "object"):
                raw = b'{"' + field.encode() + b'":' + nested(depth, kind) + b"}"
                r = await send_raw(node, key, method, path, raw)
                body = await r.get_json()
                never_500(r, body)
                assert r.status_code in (400, 404, 422), (path, depth, kind, r.status_code, body)


async def test_huge_json_near_and_over_the_1_mib_limit(node, org):
    key = org["api_key"]
    for method, path, field in json_routes(org):
        # valid JSON of exactly 1 MiB: a rule or schema error at most, never a 413 or 500
        head = b'{"' + field.encode() + b'":"'
        raw = head + b"x" * (MiB - len(head) - 2) + b'"}'
        assert len(raw) == MiB
        r = await send_raw(node, key, method, path, raw)
        body = await r.get_json()
        never_500(r, body)
        assert r.status_code != 413, path
        # one byte more: 413 request.bad_request, connection closed
        raw = head + b"x" * (MiB - len(head) - 1) + b'"}'
        r = await send_raw(node, key, method, path, raw)
        body = await r.get_json()
        assert r.status_code == 413, (path, body)
        assert err(body) == {"code": "request.bad_request", "message": "The request body is too large."}
        assert r.headers.get("Connection") == "close"
        # many small members and a long array, under the limit
        for raw in (b"{" + b",".join(b'"k%d":%d' % (i, i) for i in range(70_000)) + b"}",
                    b'{"' + field.encode() + b'":[' + b",".join([b"0"] * 400_000) + b"]}",
                    b'{"' + field.encode() + b'":' + b"9" * 500_000 + b"}",
                    b'{"' + field.encode() + b'":1e999999}'):
            assert len(raw) <= MiB
            r = await send_raw(node, key, method, path, raw)  # how long it takes: bench/hostile_json.py
            body = await r.get_json()
            never_500(r, body)
            assert 400 <= r.status_code < 500, (path, raw[:40], body)


NON_UTF8 = {
    "latin-1": '{"name": "Caf\xe9"}'.encode("latin-1"),
    "utf-16": '{"name": "x"}'.encode("utf-16"),
    "utf-16-no-bom": '{"name": "x"}'.encode("utf-16-le"),
    "utf-32": '{"name": "x"}'.encode("utf-32"),
    "lone-continuation": b'{"name": "\x80"}',
    "overlong-slash": b'{"name": "\xc0\xaf"}',
    "encoded-surrogate": b'{"name": "\xed\xa0\x80"}',
    "truncated-sequence": b'{"name": "\xe2\x82"}',
    "invalid-byte-ff": b"\xff\xfe\xfd",
}


@pytest.mark.parametrize("name", list(NON_UTF8))
async def test_non_utf8_bodies_are_a_bad_request(node, org, name):
    key = org["api_key"]
    for method, path, _field in json_routes(org):
        r = await send_raw(node, key, method, path, NON_UTF8[name])
        body = await r.get_json()
        assert r.status_code == 400, (path, body)
        assert err(body)["code"] == "request.bad_request", (path, body)


ODD_STRINGS = {
    "lone-high-surrogate": '"\\ud800"',
    "lone-surrogate-as-key": '{"\\ud800": 1}',
    "deep-lone-surrogate": "[" * 900 + '"\\udbff"' + "]" * 900,
    "lone-low-surrogate": '"\\udfff"',
    "reversed-pair": '"\\udc00\\ud800"',
    "nul": '"a\\u0000b"',
    "bom": '"\\ufeff"',
    "rtl-override": '"\\u202e"',
    "big-int": "1" + "0" * 4000,
    "nan": "NaN",
    "infinity": "-Infinity",
    "float-overflow": "1e400",
}


@pytest.mark.parametrize("name", list(ODD_STRINGS))
async def test_odd_json_values_never_fail_the_server(node, org, name):
    key = org["api_key"]
    for method, path, field in json_routes(org):
        raw = ('{"' + field + '":' + ODD_STRINGS[name] + "}").encode()
        r = await send_raw(node, key, method, path, raw)
        body = await r.get_json()
        never_500(r, body)
        if "surrogate" in name:  # not text: refused before any actor sees it
            assert (r.status_code, err(body)["code"]) == (400, "request.bad_request"), (path, body)
    # the list reads of everything just written still answer
    for path in ("/v1/projects", "/v1/webhooks", "/v1/api-keys", "/v1/support/tickets", "/v1/generation/requests"):
        r = await node.call("GET", path, key)
        assert r.status_code == 200, (path, await r.get_data(as_text=True))


async def test_hostile_headers_and_query_strings(node, org):
    key = org["api_key"]
    cases = [
        ("GET", "/v1/projects", {"X-Service-Project": "\udcff".encode("utf-8", "surrogateescape").decode("latin-1")}),
        ("GET", "/v1/generation/requests", {"X-Service-Project": "%ed%a0%80"}),
        ("GET", "/v1/projects/%ed%a0%80", {}),
        ("GET", "/v1/projects/%ff", {}),
        ("GET", "/v1/webhooks/%ed%a0%80/deliveries", {}),
        ("GET", "/v1/webhooks?limit=99999999999999999999999&offset=99999999999999999999999", {}),
        ("GET", "/v1/webhooks?offset=-99999999999999999999999", {}),
        ("GET", "/v1/billing/holds?limit=99999999999999999999999", {}),
        ("GET", "/v1/generation/requests?limit=-99999999999999999999999", {}),
        ("GET", "/v1/runs?limit=99999999999999999999999&cursor=%ed%a0%80", {}),
        ("GET", "/v1/billing/ledger?since=%ed%a0%80&until=9999999999-01-01T00:00:00Z", {}),
        ("GET", "/v1/billing/usage?since=" + "9" * 5000, {}),
        ("GET", "/v1/support/tickets?state=%ed%a0%80&limit=1e9", {}),
        ("GET", "/v1/generation/requests?project_id=%ed%a0%80", {}),
        ("GET", "/v1/generation/requests?limit=%ff%fe", {}),
        ("GET", "/v1/generation/requests?limit=" + "9" * 5000, {}),
        ("GET", "/v1/billing/ledger?limit=-1&offset=" + "9" * 400, {}),
        ("GET", "/v1/generation/requests/%00/status", {}),
        ("GET", "/v1/generation/requests/" + "a" * 10_000 + "/status", {}),
        ("GET", "/v1/projects", {"Authorization": "Bearer " + "\xff" * 100}),
        ("GET", "/v1/projects", {"Authorization": "Bearer " + "a" * 20_000}),
    ]
    failures = []
    for method, path, headers in cases:
        h = {"Authorization": f"Bearer {key}", **headers}
        r = await node.client.open(path, method=method, headers=h)
        if r.status_code >= 500:
            failures.append((path[:80], headers, r.status_code))
    assert failures == [], "\n".join(map(str, failures))


# -- malformed multipart ---------------------------------------------------------------------------
def malformed_bodies() -> dict[str, tuple[bytes, str]]:
    png = image_bytes("PNG")
    ok, ctype = multipart([("file", "a.png", "image/png", png)])
    b = "testboundary7MA4YWxk"
    return {
        "no-boundary": (ok, "multipart/form-data"),
        "empty-boundary": (ok, 'multipart/form-data; boundary=""'),
        "wrong-boundary": (ok, "multipart/form-data; boundary=somethingelse"),
        "boundary-too-long": (ok.replace(b.encode(), b"z" * 200), "multipart/form-data; boundary=" + "z" * 200),
        "truncated": (ok[:-30], ctype),
        "truncated-in-headers": (ok[:60], ctype),
        "no-final-boundary": (ok[: ok.rindex(b"--" + b.encode() + b"--")], ctype),
        "empty-body": (b"", ctype),
        "only-final-boundary": (f"--{b}--\r\n".encode(), ctype),
        "no-file-part": multipart([("project_id", "default")]),
        "two-file-parts": multipart([("file", "a.png", "image/png", png), ("file", "b.png", "image/png", png)]),
        "file-as-field": multipart([("file", "not a file")]),
        "unnamed-part": (ok.replace(b'name="file"; ', b""), ctype),
        "no-content-disposition": (ok.replace(b'Content-Disposition: form-data; name="file"; filename="a.png"\r\n',
                                              b""), ctype),
        "header-without-colon": (ok.replace(b"Content-Type: image/png", b"Content-Type image/png"), ctype),
        "huge-part-header": (ok.replace(b"Content-Type: image/png", b"X-Pad: " + b"p" * 200_000), ctype),
        "garbage": (os.urandom(4096), ctype),
        "json-instead": (b'{"file": "abc"}', "application/json"),
        "urlencoded": (b"file=abc", "application/x-www-form-urlencoded"),
        "mixed-instead-of-form-data": (ok, ctype.replace("form-data", "mixed")),
        "nested-multipart": multipart([("file", "a.png", f"multipart/mixed; boundary={b}", ok)]),
        "non-utf8-field": multipart([("file", "a.png", "image/png", png), ("project_id", b"\xff\xfe")]),
        "non-utf8-names": (ok.replace(b'name="file"', b'name="fi\xffle"'), ctype),
        "many-parts": multipart([("file", "a.png", "image/png", png)] + [(f"x{i}", "1") for i in range(200)]),
        "nul-in-names": (ok.replace(b'filename="a.png"', b'filename="a\x00.png"'), ctype),
        "rfc2231-non-latin1-boundary": (ok, "multipart/form-data; boundary*=UTF-8''%E2%98%83"),
        "boundary-with-quotes-and-spaces": (ok, 'multipart/form-data; boundary="a b\\"c"'),
    }


MALFORMED = list(malformed_bodies())
# Malformations the multipart parser tolerates: the part still has a name, a file and a body,
# so the upload may succeed (201); anything else must be a 4xx.
TOLERATED = {"boundary-too-long", "header-without-colon", "huge-part-header", "nul-in-names"}


@pytest.mark.parametrize("name", MALFORMED)
async def test_malformed_multipart_is_a_clear_4xx(node, org, tmp_path, name):
    data, ctype = malformed_bodies()[name]
    r = await node.call("POST", UPLOADS, org["api_key"], data=data, headers={"Content-Type": ctype})
    body = await r.get_json()
    if name in TOLERATED and r.status_code == 201:
        assert body["data"]["content_type"] == "image/png"
        return
    assert 400 <= r.status_code < 500, (name, r.status_code, body)
    e = err(body)
    assert e["code"] in ("request.bad_request", "request.validation_failed"), e
    assert e["message"], e
    if name in ("no-file-part", "two-file-parts", "file-as-field"):
        assert r.status_code == 400 and e["code"] == "request.validation_failed", e
        assert [x["key"] for x in e["details"]["errors"]] == ["file"], e
    if name in ("no-boundary", "truncated", "json-instead", "garbage", "many-parts"):
        assert (r.status_code, e["code"]) == (400, "request.bad_request"), e
    assert leftovers(tmp_path) == []
    assert node.store.one("SELECT COUNT(*) AS n FROM assets")["n"] == 0


# == against a real `genservice serve` ===========================================================
OPERATOR = "hostile-operator-token"


class Server:
    def __init__(self, proc: subprocess.Popen, url: str, data_dir: Path, log: Path) -> None:
        self.proc = proc
        self.url = url
        m = re.match(r"http://([^:/]+):(\d+)", url)
        self.host, self.port = m.group(1), int(m.group(2))
        self.data_dir = data_dir
        self.log = log
        self.http = httpx.Client(base_url=url, timeout=30)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss(self) -> int:
        """Resident memory now, bytes: the server's and its media-check workers' (the
        check decodes there, tests/proc_memory.py)."""
        return total_kib(self.pid, "VmRSS") * 1024

    def peak(self) -> int:
        """Peak resident memory since the last reset_peak(), bytes (each process's peak,
        added: at least what they held at once)."""
        return total_kib(self.pid, "VmHWM") * 1024

    def reset_peak(self) -> bool:
        try:
            reset_peaks(self.pid)
            return True
        except OSError:
            return False

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def op(self, method: str, path: str, json=None) -> httpx.Response:
        return self.http.request(method, "/operator/v1" + path, json=json,
                                 headers={"Authorization": f"Bearer {OPERATOR}"})

    def create_org(self, name: str = "Acme", email: str | None = None) -> dict:
        r = self.op("POST", "/organizations", {"name": name, "owner_email": email or f"owner@{name.lower()}.test",
                                               "approved": True})
        assert r.status_code == 201, r.text
        return r.json()["data"]


@contextmanager
def real_server(tmp_path: Path, **env_extra: str):
    """A `genservice serve` subprocess on 127.0.0.1:0 (test mode, fresh data dir); its log
    goes to tmp_path/serve-N.log. Stopped with SIGTERM (then SIGKILL) at the end."""
    data = tmp_path / "data"
    with ServeProcess(data, {**HARNESS_ENV, "GENSERVICE_HOST": "127.0.0.1", **env_extra}, operator_token=OPERATOR,
                      log_dir=tmp_path, new_session=True) as node:
        server = Server(node.proc, node.url, data, node.log)
        try:
            yield server
        finally:
            server.http.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One real server for the module's real-server tests, warmed up (an upload of each image
    type, a JSON write) so imports and thread pools are not counted as growth."""
    with real_server(tmp_path_factory.mktemp("hostile")) as server:
        org = server.create_org()
        server.key = org["api_key"]
        for fmt, ctype in (("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp")):
            body, content_type = multipart([("file", "w", ctype, image_bytes(fmt))])
            r = server.http.post("/v1/generation/uploads", content=body,
                                 headers={"Content-Type": content_type, "Authorization": f"Bearer {server.key}"})
            assert r.status_code == 201, r.text
        r = server.http.post("/v1/projects", json={"name": "warm"}, headers={"Authorization": f"Bearer {server.key}"})
        assert r.status_code == 201, r.text
        yield server


@contextmanager
def measured(server: Server, figures: dict):
    """Peak RSS growth of the server across the block (bytes) into figures['rss_growth']."""
    time.sleep(0.2)
    before = server.rss()
    assert server.reset_peak(), "cannot reset the peak RSS (/proc/<pid>/clear_refs)"
    started = time.perf_counter()
    yield
    figures["seconds"] = time.perf_counter() - started
    time.sleep(0.2)
    figures["rss_growth"] = max(server.peak(), server.rss()) - before
    figures["rss_after_growth"] = server.rss() - before


class RawExchange:
    """One request over a raw socket: headers, then a body sent in pieces while a reader
    thread waits for the answer, so the test can tell whether the answer came before the
    body was finished, and whether (and when) the server then closed the connection."""

    def __init__(self, server: Server, head: bytes) -> None:
        self.sock = socket.create_connection((server.host, server.port), timeout=60)
        self.started = time.perf_counter()
        self.sock.sendall(head)
        self.sent = 0
        self.sent_when_answered: int | None = None
        self.answer = bytearray()
        self.answered_after: float | None = None  # seconds from the start
        self.closed_after: float | None = None
        self.answered = threading.Event()
        self.closed = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _complete(self) -> bool:
        head, sep, body = bytes(self.answer).partition(b"\r\n\r\n")
        if not sep:
            return False
        m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        return m is None or len(body) >= int(m.group(1))

    def _read(self) -> None:
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    break
                if self.sent_when_answered is None:
                    self.sent_when_answered = self.sent
                self.answer += data
                if not self.answered.is_set() and self._complete():
                    self.answered_after = time.perf_counter() - self.started
                    self.answered.set()
        except OSError:  # reset by the server: closed too
            pass
        finally:
            self.closed_after = time.perf_counter() - self.started
            self.closed.set()
            self.answered.set()

    def send_body(self, pieces, stop_when_answered: bool = True) -> None:
        self.sock.settimeout(5)
        try:
            for piece in pieces:
                if stop_when_answered and self.answered.is_set():
                    return
                self.sock.sendall(piece)
                self.sent += len(piece)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            return

    def finish(self, timeout: float = 60) -> tuple[int, dict[str, str], dict | None]:
        assert self.answered.wait(timeout), "no answer"
        head, _, body = bytes(self.answer).partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        try:
            parsed = json.loads(body[: int(headers.get("content-length", len(body)))] or b"null")
        except ValueError:
            parsed = None
        return status, headers, parsed

    def wait_closed(self, timeout: float = 10) -> bool:
        """True when the server closed the connection within `timeout` seconds."""
        closed = self.closed.wait(timeout)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader (close alone does not)
        except OSError:
            pass
        self.sock.close()
        self._reader.join(5)
        return closed


def pieces(total: int, size: int = 256 * 1024, fill: bytes = b"\0"):
    block = fill * size
    left = total
    while left > 0:
        n = min(size, left)
        yield block[:n]
        left -= n


def chunked(pieces_iter):
    for piece in pieces_iter:
        yield b"%x\r\n" % len(piece) + piece + b"\r\n"
    yield b"0\r\n\r\n"


def request_head(server: Server, method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {server.host}:{server.port}",
             f"Authorization: Bearer {server.key}"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


BOUNDARY = "hostileboundary0123"


def multipart_head_and_tail(ctype: str = "image/png") -> tuple[bytes, bytes]:
    head = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.png\"\r\n"
            f"Content-Type: {ctype}\r\n\r\n").encode()
    return head, f"\r\n--{BOUNDARY}--\r\n".encode()


def test_real_51_mib_plus_1_declared_is_413_before_the_body_is_read(served, record_property):
    total = 51 * MiB + 1
    figures: dict = {}
    with measured(served, figures):
        x = RawExchange(served, request_head(served, "POST", UPLOADS, {
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}", "Content-Length": str(total)}))
        x.send_body(pieces(total))
        status, headers, body = x.finish()
    record_property("figures", figures)
    assert status == 413
    assert body["error"]["code"] == "request.bad_request"
    assert headers.get("connection") == "close"
    assert x.sent_when_answered is not None and x.sent_when_answered < total  # answered mid-send
    assert x.sent < total  # the client never got to finish
    assert x.wait_closed(), x.closed_after  # the server closed it (how soon is printed below)
    assert figures["rss_growth"] < 16 * MiB, figures
    print("51MiB+1 declared:", {k: round(v / MiB, 2) if "rss" in k else round(v, 3) for k, v in figures.items()},
          f"answered after {x.answered_after:.3f} s with {x.sent_when_answered} of {total} bytes sent;"
          f" closed after {x.closed_after:.3f} s")


@pytest.mark.parametrize("client", ["stops-when-answered", "keeps-sending"])
def test_real_early_413s_close_at_once_and_leak_nothing(served, client):
    """Twenty 413s answered before their body was read, the client either stopping at the
    answer or sending all 51 MiB regardless: each connection is closed by the server at once,
    before its keep-alive timeout could have done it, and the server's open descriptors and
    memory come back to where they were."""
    total = 51 * MiB + 1
    time.sleep(0.5)
    fds_before = served.open_fds()
    figures: dict = {}
    closes = []
    with measured(served, figures):
        for _ in range(20):
            x = RawExchange(served, request_head(served, "POST", UPLOADS, {
                "Content-Type": f"multipart/form-data; boundary={BOUNDARY}", "Content-Length": str(total)}))
            x.send_body(pieces(total), stop_when_answered=client == "stops-when-answered")
            status, headers, _body = x.finish()
            assert (status, headers.get("connection")) == (413, "close")
            assert x.wait_closed(), "the server kept the connection open"
            closes.append(x.closed_after)
            # an idle timeout starts at the answer at the earliest: closed before one could fire
            assert x.closed_after < x.answered_after + KEEP_ALIVE_S, (x.answered_after, x.closed_after)
    wait_until_sync(lambda: served.open_fds() <= fds_before + 1)  # each connection closed by the server
    assert served.open_fds() <= fds_before + 1, (fds_before, served.open_fds())
    assert figures["rss_growth"] < 16 * MiB, figures
    print(f"early 413 x20 ({client}): slowest close {max(closes):.3f} s, fds {fds_before} -> {served.open_fds()},"
          f" peak RSS growth {figures['rss_growth'] / MiB:.2f} MiB")


def test_real_early_401_on_a_big_upload_closes(served):
    total = 40 * MiB
    x = RawExchange(served, request_head(served, "POST", UPLOADS, {
        "Content-Type": f"multipart/form-data; boundary={BOUNDARY}", "Content-Length": str(total),
        "Authorization": "Bearer aak_" + "0" * 48}).replace(f"Bearer {served.key}".encode(), b"Bearer nope"))
    x.send_body(pieces(total), stop_when_answered=False)
    status, headers, body = x.finish()
    assert (status, headers.get("connection"), body) == (401, "close", {"status": False, "error": "Unauthorized"})
    assert x.wait_closed(), x.closed_after  # the server closed it (how soon is printed)
    assert x.sent < total


def test_real_51_mib_plus_1_chunked_is_413_with_memory_bounded(served):
    head, tail = multipart_head_and_tail()
    figures: dict = {}
    with measured(served, figures):
        x = RawExchange(served, request_head(served, "POST", UPLOADS, {
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}", "Transfer-Encoding": "chunked"}))
        x.send_body(chunked(iter([head, *pieces(51 * MiB + 1 - len(head) - len(tail)), tail])))
        status, headers, body = x.finish()
    assert status == 413, body
    assert body["error"]["code"] == "request.bad_request"
    assert headers.get("connection") == "close"
    assert x.wait_closed()
    assert figures["rss_growth"] < 16 * MiB, figures
    assert list((served.data_dir / "assets" / "tmp").iterdir()) == []
    print("51MiB+1 chunked:", {k: round(v / MiB, 2) if "rss" in k else v for k, v in figures.items()})


def test_real_50_mib_plus_1_file_is_422(served):
    head, tail = multipart_head_and_tail()
    png = image_bytes("PNG")
    size = 50 * MiB + 1
    total = len(head) + size + len(tail)
    figures: dict = {}
    with measured(served, figures):
        x = RawExchange(served, request_head(served, "POST", UPLOADS, {
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}", "Content-Length": str(total)}))
        x.send_body(iter([head, png, *pieces(size - len(png)), tail]), stop_when_answered=False)
        status, _headers, body = x.finish(timeout=120)
    assert status == 422, body
    assert (body["error"]["code"], body["error"]["message"]) == ("request.validation_failed", "File exceeds 50 MiB.")
    assert x.sent == total
    x.wait_closed(0)
    assert figures["rss_growth"] < 16 * MiB, figures
    assert list((served.data_dir / "assets" / "tmp").iterdir()) == []
    print("50MiB+1 file:", {k: round(v / MiB, 2) if "rss" in k else v for k, v in figures.items()})


@pytest.mark.parametrize("name", list(BOMBS))
def test_real_pixel_bomb_is_422_with_bounded_memory(served, name):
    data, ctype = BOMBS[name]
    body, content_type = multipart([("file", "bomb.png", ctype, data)])
    figures: dict = {}
    with measured(served, figures):
        r = served.http.post("/v1/generation/uploads", content=body,
                             headers={"Content-Type": content_type, "Authorization": f"Bearer {served.key}"})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["message"] == NOT_IMAGE
    assert figures["rss_growth"] < 50 * MiB, figures  # far below a decode of the declared pixels
    print(f"bomb {name}:", {k: round(v / MiB, 2) if "rss" in k else round(v, 3) for k, v in figures.items()})


def test_real_json_over_1_mib_is_413_declared_or_chunked(served):
    # declared: refused from the length, before reading
    total = 50 * MiB
    figures: dict = {}
    with measured(served, figures):
        x = RawExchange(served, request_head(served, "POST", "/v1/projects", {
            "Content-Type": "application/json", "Content-Length": str(total)}))
        x.send_body(iter([b'{"name":"', *pieces(total - 11, fill=b"x"), b'"}']))
        status, headers, body = x.finish()
    assert status == 413 and body["error"]["code"] == "request.bad_request"
    assert headers.get("connection") == "close"
    assert x.sent < total and x.wait_closed()
    assert figures["rss_growth"] < 16 * MiB, figures
    # chunked: refused once more than 1 MiB arrived
    figures2: dict = {}
    with measured(served, figures2):
        x = RawExchange(served, request_head(served, "POST", "/v1/projects", {
            "Content-Type": "application/json", "Transfer-Encoding": "chunked"}))
        x.send_body(chunked(iter([b'{"name":"', *pieces(total, fill=b"x"), b'"}'])))
        status, headers, body = x.finish()
    assert status == 413 and body["error"]["code"] == "request.bad_request"
    assert x.sent < total and x.wait_closed()
    assert figures2["rss_growth"] < 16 * MiB, figures2
    print("json 50MiB declared:", round(figures["rss_growth"] / MiB, 2), "chunked:", round(figures2["rss_growth"] / MiB, 2),
          "MiB")


@pytest.mark.parametrize("shape", ["part-header-without-end", "text-field", "preamble", "epilogue"])
def test_real_hostile_multipart_shapes_stay_bounded(served, shape):
    """50 MiB spent where a multipart parser might buffer: one endless part header line, a
    50 MiB text field, a 50 MiB preamble before the first boundary, a 50 MiB epilogue."""
    size = 50 * MiB
    png = image_bytes("PNG")
    file_part = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.png\"\r\n"
                 f"Content-Type: image/png\r\n\r\n").encode() + png
    if shape == "part-header-without-end":
        head = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.png\"\r\n"
                "X-Pad: ").encode()
        tail = b"\r\n\r\n" + png + f"\r\n--{BOUNDARY}--\r\n".encode()
    elif shape == "text-field":
        head = f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"project_id\"\r\n\r\n".encode()
        tail = f"\r\n--{BOUNDARY}--\r\n".encode()
    elif shape == "preamble":
        head = b""
        tail = b"\r\n" + file_part + f"\r\n--{BOUNDARY}--\r\n".encode()
    else:
        head = file_part + f"\r\n--{BOUNDARY}--\r\n".encode()
        tail = b""
    total = len(head) + size + len(tail)
    figures: dict = {}
    with measured(served, figures):
        x = RawExchange(served, request_head(served, "POST", UPLOADS, {
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}", "Content-Length": str(total)}))
        x.send_body(iter([head, *pieces(size, fill=b"p"), tail]), stop_when_answered=False)
        status, _headers, body = x.finish(timeout=120)
    x.wait_closed(0)
    print(f"multipart {shape}: status {status}",
          {k: round(v / MiB, 2) if "rss" in k else round(v, 2) for k, v in figures.items()})
    if shape == "text-field":  # well-formed, but the field is over its 200 characters
        assert (status, body["error"]["code"]) == (400, "request.validation_failed"), body
        assert body["error"]["details"]["errors"][0]["key"] == "project_id"
    else:
        assert (status, body["error"]["code"]) == (400, "request.bad_request"), body
    assert figures["rss_growth"] < 16 * MiB, figures
    assert list((served.data_dir / "assets" / "tmp").iterdir()) == []
