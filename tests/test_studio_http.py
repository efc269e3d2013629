"""Studio II's routes without a browser: Generate and Cancel through htmx answer the output
pane (a refusal keeps its status, in plain words), a repeated form token makes one job,
thumbnails are made once, hiding a job, the gallery's filters; the OpenAI `size` of the
"Use the API" snippet maps back to the job's tier."""

from __future__ import annotations

import io
import re

import pytest
import trio
from werkzeug.datastructures import FileStorage

from service.catalog.capabilities import CAPABILITIES
from service.http.openai_compat import size_to_tier
from service.views.studio_api import image_size
from tests.test_media_samples import image_bytes
from tests.pages import csrf, page
from tests.test_dashboard_http import HTML, logged_in, wait_final

pytestmark = pytest.mark.usefixtures("cheap_hashes")
HX = {"HX-Request": "true"}
TOKEN = re.compile(r'name="form_token" id="form-token" value="([^"]+)" hx-swap-oob="true"')


async def test_generate_through_htmx_answers_the_pane_and_a_repeat_makes_one_job(node):
    org = await logged_in(node)
    _, html = await page(node.client, "/studio")
    form = {"csrf_token": csrf(html), "form_token": "tok-1", "capability": "image.generate", "prompt": "a fox"}
    r = await node.client.post("/studio", form=form, headers=HX)
    body = await r.get_data(as_text=True)
    assert r.status_code == 200 and "<html" not in body
    job_id = re.search(r'data-job="([0-9a-f-]{36})"', body).group(1)
    assert TOKEN.search(body)  # a fresh token for the next Generate, out of band
    r = await node.client.post("/studio", form=form, headers=HX)  # the same token again (a double click)
    assert r.status_code == 200 and f'data-job="{job_id}"' in await r.get_data(as_text=True)
    listed = await (await node.call("GET", "/v1/generation/requests", org["api_key"])).get_json()
    assert [j["request_id"] for j in listed["data"]] == [job_id]
    await wait_final(node, org["api_key"], job_id)
    r = await node.client.get(f"/studio/jobs/{job_id}/pane")
    text = await r.get_data(as_text=True)
    assert r.status_code == 200 and "Use the API" in text and "Bearer $GENSERVICE_API_KEY" in text and "aak_" not in text


async def test_a_refused_generate_keeps_its_status_and_says_what_to_do(node):
    await logged_in(node)
    _, html = await page(node.client, "/studio")
    r = await node.client.post("/studio", form={"csrf_token": csrf(html), "capability": "image.generate", "prompt": ""},
                               headers=HX)
    body = await r.get_data(as_text=True)
    assert r.status_code == 422 and 'id="pane-error"' in body
    assert "This cannot be generated as set" in body and "generate again" in body


async def test_cancel_through_htmx_answers_the_jobs_section(node):
    org = await logged_in(node)
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", org["api_key"],
                        json={"prompt": "slow [[delay:30]]"})
    job_id = (await r.get_json())["request_id"]
    _, html = await page(node.client, "/studio")
    r = await node.client.post(f"/studio/jobs/{job_id}/cancel", form={"csrf_token": csrf(html)}, headers=HX)
    body = await r.get_data(as_text=True)
    assert r.status_code == 200 and body.lstrip().startswith(f'<section id="job-{job_id}"')
    assert (await wait_final(node, org["api_key"], job_id))["status"] == "canceled"


async def test_thumbnails_are_made_once_and_only_for_images_of_the_organization(node):
    org = await logged_in(node)
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", org["api_key"], json={"prompt": "a fox"})
    status = await wait_final(node, org["api_key"], (await r.get_json())["request_id"])
    asset = status["outputs"][0]["id"]
    first = await node.client.get(f"/studio/thumbs/{asset}")
    data = await first.get_data()
    assert first.status_code == 200 and first.headers["Content-Type"] == "image/webp" and data[8:12] == b"WEBP"
    assert "immutable" in first.headers["Cache-Control"]
    again = await node.client.get(f"/studio/thumbs/{asset}")
    assert await again.get_data() == data
    assert node.store.scalar("SELECT COUNT(*) FROM thumbnails") == 1
    r = await node.client.get("/studio/thumbs/00000000-0000-0000-0000-000000000000", headers=HTML)
    assert r.status_code == 404 and "Thumbnail not found." in await r.get_data(as_text=True)
    other = await node.create_org(name="Other", email="boss@other.test")
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", other["api_key"], json={"prompt": "x"})
    theirs = await wait_final(node, other["api_key"], (await r.get_json())["request_id"])
    r = await node.client.get(f"/studio/thumbs/{theirs['outputs'][0]['id']}", headers=HTML)
    assert r.status_code == 404


async def test_hiding_a_job_takes_it_off_the_grid_only(node):
    org = await logged_in(node)
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", org["api_key"], json={"prompt": "a fox"})
    job_id = (await r.get_json())["request_id"]
    await wait_final(node, org["api_key"], job_id)
    _, html = await page(node.client, "/studio")
    assert f'data-tile="{job_id}"' in html
    other = await node.create_org(name="Other", email="boss@other.test")
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", other["api_key"], json={"prompt": "x"})
    theirs = (await r.get_json())["request_id"]
    r = await node.client.post(f"/studio/jobs/{theirs}/hide", form={"csrf_token": csrf(html)}, headers=HTML)
    assert r.status_code == 404 and "Generation request not found." in await r.get_data(as_text=True)
    r = await node.client.post(f"/studio/jobs/{job_id}/hide", form={"csrf_token": csrf(html)})
    assert r.status_code == 303 and r.headers["Location"] == "/studio#generations"
    _, html = await page(node.client, "/studio")
    assert f'data-tile="{job_id}"' not in html
    listed = await (await node.call("GET", "/v1/generation/requests", org["api_key"])).get_json()
    assert [j["request_id"] for j in listed["data"]] == [job_id]


async def test_gallery_filters_ignore_what_they_do_not_know(node):
    org = await logged_in(node)
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", org["api_key"], json={"prompt": "a fox"})
    job_id = (await r.get_json())["request_id"]
    for query in ("gcap=nope", "gproject=not-a-project", "before=garbage", "gcap=image.generate"):
        r = await node.client.get(f"/studio/gallery?{query}")
        assert r.status_code == 200 and f'data-tile="{job_id}"' in await r.get_data(as_text=True), query
    r = await node.client.get("/studio/gallery?gcap=video.generate")
    assert f'data-tile="{job_id}"' not in await r.get_data(as_text=True)


@pytest.mark.parametrize("ratio", next(c for c in CAPABILITIES if c.id == "image.generate").aspect_ratios)
@pytest.mark.parametrize("tier", ["1k", "2k"])
async def test_the_openai_size_maps_back_to_the_jobs_tier_and_aspect_ratio(node, ratio, tier):
    model = node.parts.generation.catalog.model("proc-image")
    assert size_to_tier(model, image_size(ratio, tier)) == {"aspect_ratio": ratio, "resolution": tier}


async def test_a_videos_thumbnail_is_its_first_frame(node):
    org = await logged_in(node)
    key = org["api_key"]
    r = await node.client.post("/v1/generation/uploads", headers={"Authorization": f"Bearer {key}"},
                               files={"file": FileStorage(io.BytesIO(image_bytes("PNG", 320, 240)), "f.png", content_type="image/png")})
    assert r.status_code == 201, await r.get_data(as_text=True)
    frame = (await r.get_json())["data"]["id"]
    r = await node.call("POST", "/v1/generation/capabilities/video.generate", key,
                        json={"prompt": "pan", "inputs": {"start_frame": [frame]}})
    assert r.status_code == 202, await r.get_data(as_text=True)
    job_id = (await r.get_json())["request_id"]
    for _ in range(1200):
        status = await (await node.call("GET", f"/v1/generation/requests/{job_id}/status", key)).get_json()
        if status["status"] not in ("queued", "rendering"):
            break
        await trio.sleep(0.05)
    assert status["status"] == "completed"
    video = status["outputs"][0]
    assert video["content_type"].startswith("video/")
    r = await node.client.get(f"/studio/thumbs/{video['id']}")
    data = await r.get_data()
    assert r.status_code == 200 and data[8:12] == b"WEBP"
    _, html = await page(node.client, "/studio")
    assert f'src="/studio/thumbs/{video["id"]}"' in html and "(video, first frame)" in html
