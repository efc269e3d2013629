"""The Python client package (clients/python, `genservice_client`) against a real
`genservice serve`: generate with wait (the job's event stream), status, jobs, balance,
cancel, uploads from a path, bytes and a file object, downloads, products, every error
class from a real answer, the automatic Idempotency-Key, and webhook signatures."""

from __future__ import annotations

import hashlib
import hmac
import io

import httpx
import pytest
from PIL import Image

import genservice_client as gc
from serve_process import HARNESS_ENV, ServeProcess
from test_openai_front import BUILTINS


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("client")
    (tmp / "catalog.toml").write_text(BUILTINS)
    with ServeProcess(tmp / "data", {**HARNESS_ENV, "GENSERVICE_CATALOG_FILE": str(tmp / "catalog.toml")},
                      operator_token="client-op", log_dir=tmp) as node:
        r = httpx.post(f"{node.url}/operator/v1/organizations", headers=node.op, timeout=30,
                       json={"name": "Client", "owner_email": "client@acme.test", "approved": True})
        assert r.status_code == 201, r.text
        yield node, r.json()["data"]


def png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(buf, "PNG")
    return buf.getvalue()


def test_generate_waits_on_the_stream_and_downloads(live, tmp_path):
    node, org = live
    with gc.Client(org["api_key"], node.url) as c:
        events = []
        job = c.generate("image.generate", "a red fox", on_event=lambda name, data: events.append(name))
        assert job["status"] == "completed" and events and events[-1] == "status"
        assert c.status(job["request_id"])["status"] == "completed"
        assert job["request_id"] in [j["request_id"] for j in c.jobs()]
        data = c.download(job["outputs"][0], tmp_path / "fox.png")
        with Image.open(tmp_path / "fox.png") as img:
            assert img.format == "PNG"
        assert data == (tmp_path / "fox.png").read_bytes()
        accepted = c.generate("image.generate", "another fox", wait=False)
        assert accepted["status"] == "queued"
        assert c.cancel(accepted["request_id"])["status"] in ("canceled", "completed")
        assert c.balance()["available"]


def test_uploads_from_a_path_bytes_and_a_file_object(live, tmp_path):
    node, org = live
    (tmp_path / "in.png").write_bytes(png())
    with gc.Client(org["api_key"], node.url) as c:
        for source in (tmp_path / "in.png", png(), io.BytesIO(png())):
            asset = c.upload(source, content_type="image/png", filename="in.png")
            assert asset["kind"] == "image" and (asset["width"], asset["height"]) == (64, 48)


def test_every_error_is_a_typed_exception_with_the_spec_code(live):
    node, org = live
    with gc.Client("aak_not-a-key", node.url) as bad:
        with pytest.raises(gc.AuthenticationError) as e:
            bad.balance()
        assert e.value.status == 401 and e.value.code == "auth.unauthorized"
    with gc.Client(org["api_key"], node.url) as c:
        with pytest.raises(gc.NotFound) as e:
            c.status("00000000-0000-4000-8000-000000000000")
        assert (e.value.code, e.value.message) == ("request.not_found", "Generation request not found.")
        assert e.value.request_id
        with pytest.raises(gc.Unprocessable) as e:
            c.generate("image.generate", "fox", model="no-such-model")
        assert e.value.code == "request.validation_failed" and e.value.details["model"] == "no-such-model"
        with pytest.raises(gc.NotFound) as e:
            c.generate("no.such.capability", "fox")
        assert e.value.message == "Unknown capability 'no.such.capability'."
        with pytest.raises(gc.InsufficientCredits) as e:
            c.generate("image.generate", "fox", model="pricey")
        assert e.value.code == "billing.insufficient_credits" and e.value.details["required"] == "250.00"
        with pytest.raises(gc.ServerError) as e:
            c.generate("image.generate", "fox", model="ghost")
        assert e.value.status == 503 and e.value.message == "Model ghost is not available on this deployment."
    viewer = httpx.post(f"{node.url}/operator/v1/organizations/{org['organization_id']}/members", headers=node.op,
                        json={"email": "viewer@client.test", "role": "read_only"}, timeout=30).json()["data"]
    with gc.Client(viewer["api_key"], node.url) as ro:
        with pytest.raises(gc.PermissionDenied) as e:
            ro.generate("image.generate", "fox")
        assert e.value.status == 403 and e.value.code == "auth.forbidden"


def test_submits_carry_an_idempotency_key_so_a_retry_never_pays_twice(live):
    node, org = live
    sent = []

    def record(request: httpx.Request) -> None:
        sent.append(request.headers.get("Idempotency-Key"))

    http = httpx.Client(base_url=node.url, event_hooks={"request": [record]}, timeout=60)
    with gc.Client(org["api_key"], node.url, http=http) as c:
        before = c.balance()["available"]
        first = c.request("POST", "/v1/generation/capabilities/image.generate", json={"prompt": "fox"},
                          headers={"Idempotency-Key": "retry-1"})
        again = c.request("POST", "/v1/generation/capabilities/image.generate", json={"prompt": "fox"},
                          headers={"Idempotency-Key": "retry-1"})
        assert first["request_id"] == again["request_id"]
        c.submit("image.generate", "fox")
        assert sent[-1] and len(sent[-1]) == 36
        c.wait(first["request_id"])
        assert float(before) - float(c.balance()["available"]) <= 2.0  # one job paid for the replay, one new


def test_verify_webhook_checks_the_signature():
    body = b'{"event":"webhook.test","data":{}}'
    sig = "sha256=" + hmac.new(b"whsec_abc", body, hashlib.sha256).hexdigest()
    assert gc.verify_webhook("whsec_abc", {"X-Service-Signature": sig}, body)
    assert not gc.verify_webhook("whsec_abc", {"X-Service-Signature": sig}, body + b" ")
    assert not gc.verify_webhook("other", {"x-service-signature": sig}, body)
    assert not gc.verify_webhook("whsec_abc", {}, body)


async def test_the_async_client_generates_uploads_and_raises_the_same_errors(live, tmp_path):
    node, org = live
    async with gc.AsyncClient(org["api_key"], node.url) as c:
        job = await c.generate("image.generate", "a red fox")
        assert job["status"] == "completed" and (await c.status(job["request_id"]))["status"] == "completed"
        assert len(await c.download(job["outputs"][0], tmp_path / "fox.png")) > 0
        assert job["request_id"] in [j["request_id"] for j in await c.jobs()]
        assert (await c.upload(png(), content_type="image/png", filename="in.png"))["kind"] == "image"
        accepted = await c.generate("image.generate", "fox", wait=False)
        assert (await c.cancel(accepted["request_id"]))["status"] in ("canceled", "completed")
        assert (await c.balance())["available"]
        with pytest.raises(gc.InsufficientCredits) as e:
            await c.generate("image.generate", "fox", model="pricey")
        assert e.value.code == "billing.insufficient_credits"
