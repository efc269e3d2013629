"""The Python client package (clients/python, `genservice_client`) against a real
`genservice serve`: generate with wait (in the submit, then the job's event stream), status, jobs, balance,
cancel, uploads from a path, bytes and a file object, downloads, products (list, get, run,
get_run, cancel_run), every error class from a real answer (RateLimited from a node with a
tight per-key limit, JobFailed from test mode's fail and nsfw directives and from a job
canceled while followed), the automatic
Idempotency-Key, webhook signatures; every answer a model of genservice_client.models."""

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

# the video model of the text-to-clip product (service/catalog/default.toml)
CAMERA = """
[[models]]
id = "camera-move"
capability = "video.generate"
backend = "camera_move_video"
resolutions = ["480p"]
durations = [5]
concurrency = 1
slots = { start_frame = 1 }
prices = [{ resolution = "480p", duration = 5, credits = "10.00" }]
"""


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("client")
    (tmp / "catalog.toml").write_text(BUILTINS + CAMERA)
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
        job = c.generate("image.generate", "a red fox", on_event=lambda name, data: events.append((name, data)))
        assert job.status == "completed" and events and events[-1][0] == "status"
        assert all(isinstance(data, gc.JobStatus) for name, data in events if name == "status")  # typed events
        assert events[-1][1].model_dump() == job.model_dump()
        assert c.status(job.request_id).status == "completed"
        assert job.request_id in [j.request_id for j in c.jobs()]
        data = c.download(job.outputs[0], tmp_path / "fox.png")
        with Image.open(tmp_path / "fox.png") as img:
            assert img.format == "PNG"
        assert data == (tmp_path / "fox.png").read_bytes()
        accepted = c.generate("image.generate", "another fox [[delay:30]]", wait=False)
        assert isinstance(accepted, gc.SubmitAccepted) and accepted.status == "queued"
        assert c.cancel(accepted.request_id).status == "canceled"
        assert c.balance().available > 0


def test_generate_waits_in_the_submit_then_follows_the_stream(live):
    """Without `on_event` a short job ends in its one request (`Prefer: wait`); a submit
    that comes back not final (202: here the preference is dropped on the way, as a node
    over its stream limit or an older node answers) is followed on the job's stream."""
    node, org = live
    sent = []

    def record(request: httpx.Request) -> None:
        sent.append((request.url.path, request.headers.get("Prefer")))

    def drop_prefer(request: httpx.Request) -> None:
        request.headers.pop("Prefer", None)

    submit = "/v1/generation/capabilities/image.generate"
    http = httpx.Client(base_url=node.url, event_hooks={"request": [record]}, timeout=60)
    with gc.Client(org["api_key"], node.url, http=http) as c:
        job = c.generate("image.generate", "a fox in one request")
        assert job.status == "completed" and sent == [(submit, "wait=60")]
        assert c.status(job.request_id).model_dump() == job.model_dump()
        sent.clear()
        assert c.generate("image.generate", "a fox", timeout=7).status == "completed"
        assert sent == [(submit, "wait=7")]
        sent.clear()
        http.event_hooks["request"].insert(0, drop_prefer)
        job = c.generate("image.generate", "a fox followed")
        assert job.status == "completed"
        assert sent == [(submit, None), (f"/v1/generation/requests/{job.request_id}/events", None)]
        with pytest.raises(gc.JobFailed):
            http.event_hooks["request"].remove(drop_prefer)
            c.generate("image.generate", "a fox [[fail:internal]]")


def test_uploads_from_a_path_bytes_and_a_file_object(live, tmp_path):
    node, org = live
    (tmp_path / "in.png").write_bytes(png())
    with gc.Client(org["api_key"], node.url) as c:
        for source in (tmp_path / "in.png", png(), io.BytesIO(png())):
            asset = c.upload(source, content_type="image/png", filename="in.png")
            assert isinstance(asset, gc.Asset) and asset.kind == "image" and (asset.width, asset.height) == (64, 48)


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
        before = c.balance().available
        first = c.request("POST", "/v1/generation/capabilities/image.generate", json={"prompt": "fox"},
                          headers={"Idempotency-Key": "retry-1"})
        again = c.request("POST", "/v1/generation/capabilities/image.generate", json={"prompt": "fox"},
                          headers={"Idempotency-Key": "retry-1"})
        assert first["request_id"] == again["request_id"]
        c.submit("image.generate", "fox")
        assert sent[-1] and len(sent[-1]) == 36
        c.wait(first["request_id"])
        assert before - c.balance().available <= 2  # one job paid for the replay, one new


def test_both_clients_let_an_idle_connection_go_before_the_node_closes_it():
    """The node closes a connection idle for its keep-alive timeout. A client that keeps it
    as long (httpx's default is the same 5 s) can send a request into that close and get a
    reset: both clients let an idle connection go sooner. (A bench soak met that reset once
    in 13,000 requests with httpx's default.)"""
    from pathlib import Path

    from service.config import Settings
    from service.main import hypercorn_config

    node_idle_s = hypercorn_config(Settings(data_dir=Path("unused"))).keep_alive_timeout
    assert httpx.Limits().keepalive_expiry >= node_idle_s  # why the clients set their own
    with gc.Client("gsk_x", "http://node") as sync_client:
        assert sync_client.http._transport._pool._keepalive_expiry < node_idle_s
    async_client = gc.AsyncClient("gsk_x", "http://node")
    assert async_client.http._transport._pool._keepalive_expiry < node_idle_s


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
        assert job.status == "completed" and (await c.status(job.request_id)).status == "completed"
        assert len(await c.download(job.outputs[0], tmp_path / "fox.png")) > 0
        assert job.request_id in [j.request_id for j in await c.jobs()]
        assert (await c.upload(png(), content_type="image/png", filename="in.png")).kind == "image"
        accepted = await c.generate("image.generate", "fox [[delay:30]]", wait=False)
        assert (await c.cancel(accepted.request_id)).status == "canceled"
        assert (await c.balance()).available > 0
        with pytest.raises(gc.InsufficientCredits) as e:
            await c.generate("image.generate", "fox", model="pricey")
        assert e.value.code == "billing.insufficient_credits"


def test_products_list_get_and_run_to_their_end(live, tmp_path):
    node, org = live
    with gc.Client(org["api_key"], node.url) as c:
        assert "text-to-clip" in [p.slug for p in c.products.list(category="video")]
        product = c.products.get("text-to-clip")
        assert isinstance(product, gc.Product) and product.inputs["prompt"].required
        run = c.products.run("text-to-clip", prompt="a fox at dawn", resolution="480p")
        assert isinstance(run, gc.ProductRun) and run.status == "completed", run.steps
        assert set(run.outputs) == {"still", "clip", "cover", "thumbnail"}
        assert [s.status for s in run.steps] == ["completed"] * 4 and run.credits.actual > 0
        clip = c.download(run.outputs["clip"][0], tmp_path / "clip.mp4")
        assert clip[4:8] == b"ftyp"
        assert c.products.get_run(run.id).model_dump() == run.model_dump()
        started = c.products.run("text-to-clip", wait=False, prompt="another fox [[delay:30]]")
        assert started.status in ("queued", "running")
        assert c.products.cancel_run(started.id).status == "canceled"
        with pytest.raises(gc.NotFound) as e:
            c.products.run("no-such-product", prompt="fox")
        assert e.value.status == 404


async def test_async_products(live):
    node, org = live
    async with gc.AsyncClient(org["api_key"], node.url) as c:
        assert "text-to-clip" in [p.slug for p in await c.products.list()]
        assert (await c.products.get("text-to-clip")).slug == "text-to-clip"
        run = await c.products.run("text-to-clip", prompt="a fox at dusk")
        assert run.status == "completed" and (await c.products.get_run(run.id)).status == "completed"
        started = await c.products.run("text-to-clip", wait=False, prompt="one more fox [[delay:30]]")
        assert (await c.products.cancel_run(started.id)).status == "canceled"


def test_bad_request_and_conflict(live):
    node, org = live
    with gc.Client(org["api_key"], node.url) as c:
        with pytest.raises(gc.BadRequest) as e:
            c.submit("image.generate", "fox", bogus=1)
        assert (e.value.status, e.value.code) == (400, "request.validation_failed")
        c.request("POST", "/v1/projects", json={"name": "Twice", "slug": "twice"})
        with pytest.raises(gc.Conflict) as e:
            c.request("POST", "/v1/projects", json={"name": "Twice", "slug": "twice"})
        assert (e.value.status, e.value.code) == (409, "request.conflict")



def test_a_job_that_ends_other_than_completed_raises_job_failed(live):
    """Test mode's prompt directives (service/backends/directives.py) end a job failed or nsfw;
    a job canceled while the client follows it (a 30 s render) ends canceled."""
    node, org = live
    with gc.Client(org["api_key"], node.url) as c:
        with pytest.raises(gc.JobFailed) as e:
            c.generate("image.generate", "a fox [[fail:internal]]")
        assert (e.value.code, e.value.message) == ("job.failed", "Generation failed due to an internal error. "
                                                                 "Credits were released.")
        assert isinstance(e.value.job, gc.JobStatus) and e.value.job.credits.actual in (None, 0)
        assert e.value.request_id == e.value.job.request_id and e.value.details["job"]["status"] == "failed"
        with pytest.raises(gc.JobFailed) as e:
            c.generate("image.generate", "a fox [[nsfw]]")
        assert (e.value.code, e.value.job.status) == ("job.nsfw", "nsfw")
        canceled = []

        def cancel_once(name: str, data) -> None:
            if not canceled and name == "status" and data.status not in ("completed", "failed", "nsfw", "canceled"):
                canceled.append(c.cancel(data.request_id).status)

        with pytest.raises(gc.JobFailed) as e:
            c.generate("image.generate", "a fox [[delay:30]]", on_event=cancel_once)
        assert canceled == ["canceled"]
        assert (e.value.code, e.value.job.status) == ("job.canceled", "canceled")


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """A node whose keys may make 2 requests at once, then one every 2 seconds."""
    tmp = tmp_path_factory.mktemp("client-limited")
    (tmp / "catalog.toml").write_text(BUILTINS)
    env = {**HARNESS_ENV, "GENSERVICE_CATALOG_FILE": str(tmp / "catalog.toml"), "GENSERVICE_RATE_LIMIT_PER_KEY": "0.5",
           "GENSERVICE_RATE_LIMIT_BURST": "2"}
    with ServeProcess(tmp / "data", env, operator_token="limited-op", log_dir=tmp) as node:
        r = httpx.post(f"{node.url}/operator/v1/organizations", headers=node.op, timeout=30,
                       json={"name": "Limited", "owner_email": "limited@acme.test", "approved": True})
        assert r.status_code == 201, r.text
        yield node, r.json()["data"]


def test_rate_limited_raises_after_its_retries_and_a_retry_waits_it_out(limited):
    node, org = limited
    with gc.Client(org["api_key"], node.url, max_retries=0) as c:
        with pytest.raises(gc.RateLimited) as e:
            for _ in range(4):
                c.balance()
        assert (e.value.status, e.value.code) == (429, "request.rate_limited")
        assert e.value.retry_after and e.value.retry_after > 0
    with gc.Client(org["api_key"], node.url, max_retries=3) as c:
        assert c.balance().available > 0  # after Retry-After
