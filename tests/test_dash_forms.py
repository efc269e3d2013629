"""Dashboard forms: Post/Redirect/Get with a one-time notice, one creation per form token
(a form sent twice creates once), Studio's upload staying in Studio with its error, and no
token in any address."""

from __future__ import annotations

import re

import pytest

from service.http.forms import ALREADY_SENT
from tests.pages import csrf, page
from tests.test_dashboard_http import logged_in
from tests.test_generation_support import multipart
from tests.test_media_samples import image_bytes

pytestmark = pytest.mark.usefixtures("cheap_hashes")

_TOKEN = re.compile(r'name="form_token"[^>]*value="([^"]+)"')


def form_token(html: str) -> str:
    m = _TOKEN.search(html)
    assert m, "form has no form_token"
    return m.group(1)


CREATES = [  # (page, action, fields, rows it creates)
    ("/keys", "/keys", {"name": "deploy"}, "SELECT count(*) FROM api_keys WHERE name = 'deploy'"),
    ("/members", "/members/invite", {"email": "new@acme.test", "role": "member"},
     "SELECT count(*) FROM invitations WHERE email = 'new@acme.test'"),
    ("/webhooks", "/webhooks", {"url": "https://hooks.example/in", "events": "member.invited"},
     "SELECT count(*) FROM webhooks"),
    ("/projects", "/projects", {"name": "Campaign"}, "SELECT count(*) FROM projects WHERE name = 'Campaign'"),
    ("/support", "/support", {"subject_line": "Help", "type": "question", "priority": "P3", "body": "Hi"},
     "SELECT count(*) FROM support_tickets"),
    ("/billing", "/billing/topups", {"credits": "500"}, "SELECT count(*) FROM topups"),
    ("/studio", "/studio", {"capability": "image.generate", "model": "proc-image", "prompt": "a fox"},
     "SELECT count(*) FROM jobs"),
]


@pytest.mark.parametrize("path,action,fields,count", CREATES, ids=[c[1] for c in CREATES])
async def test_a_form_sent_twice_creates_once(node, path, action, fields, count):
    await logged_in(node)
    _, html = await page(node.client, path)
    form = {"csrf_token": csrf(html), "form_token": form_token(html), **fields}
    first = await node.client.post(action, form=form)
    assert first.status_code == 303, await first.get_data(as_text=True)
    assert node.store.scalar(count) == 1
    again = await node.client.post(action, form=form)  # Back and send again, or a double click
    assert again.status_code == 303 and again.headers["Location"] == first.headers["Location"]
    assert node.store.scalar(count) == 1
    if first.headers["Location"].startswith("/"):
        _, shown = await page(node.client, first.headers["Location"])
        assert ALREADY_SENT in shown
    # a new render gives a new token: the person can create a second one on purpose
    _, html = await page(node.client, path)
    assert form_token(html) != form["form_token"]


async def test_a_refused_form_frees_its_token(node):
    await logged_in(node)
    _, html = await page(node.client, "/keys")
    form = {"csrf_token": csrf(html), "form_token": form_token(html), "name": ""}
    r = await node.client.post("/keys", form=form)
    assert r.status_code == 422 and "name is required." in await r.get_data(as_text=True)
    r = await node.client.post("/keys", form={**form, "name": "fixed"})
    assert r.status_code == 303 and node.store.scalar("SELECT count(*) FROM api_keys WHERE name = 'fixed'") == 1


async def test_a_reload_after_creating_a_key_shows_it_no_more_and_creates_nothing(node):
    await logged_in(node)
    _, html = await page(node.client, "/keys")
    r = await node.client.post("/keys", form={"csrf_token": csrf(html), "form_token": form_token(html),
                                              "name": "ci"})
    assert r.status_code == 303
    _, shown = await page(node.client, "/keys")  # the page the redirect opens: the key, once
    assert 'id="new-key">aak_' in shown
    _, reloaded = await page(node.client, "/keys")  # F5 repeats this GET, not the post
    assert 'id="new-key"' not in reloaded
    assert node.store.scalar("SELECT count(*) FROM api_keys WHERE name = 'ci'") == 1


async def test_a_change_says_what_it_did_once(node):
    await logged_in(node)
    _, html = await page(node.client, "/settings")
    r = await node.client.post("/settings", form={"csrf_token": csrf(html), "name": "Renamed"})
    assert r.status_code == 303
    _, shown = await page(node.client, "/settings")
    assert '<p class="note" role="status">Organization renamed.</p>' in shown
    _, again = await page(node.client, "/settings")
    assert "Organization renamed." not in again


async def test_a_bad_upload_in_studio_comes_back_to_studio_with_its_reason(node):
    await logged_in(node)
    _, html = await page(node.client, "/studio?capability=video.generate")
    assert 'id="studio-upload-form"' in html
    back = "/studio?capability=video.generate&model=camera-move&prompt=a+slow+pan"
    body, ctype = multipart([("csrf_token", csrf(html)), ("next", back),
                             ("file", "notes.txt", "text/plain", b"just some text")])
    r = await node.client.post("/assets/upload", data=body, headers={"Content-Type": ctype})
    assert r.status_code == 303 and r.headers["Location"] == back
    _, shown = await page(node.client, back)
    assert '<div class="error" role="alert" id="upload-error"><p>Unsupported content type' in shown
    assert ">a slow pan</textarea>" in shown  # the form as it was
    assert node.store.scalar("SELECT count(*) FROM assets") == 0
    # a good file comes back too, with a notice
    body, ctype = multipart([("csrf_token", csrf(html)), ("next", back),
                             ("file", "s.png", "image/png", image_bytes("PNG"))])
    r = await node.client.post("/assets/upload", data=body, headers={"Content-Type": ctype})
    asset_id = node.store.scalar("SELECT id FROM assets")
    assert r.status_code == 303 and r.headers["Location"] == back + "&input_start_frame=" + asset_id  # picked
    _, shown = await page(node.client, r.headers["Location"])
    assert "Uploaded image" in shown and 'id="upload-error"' not in shown
    assert f'<option value="{asset_id}" selected>' in shown


async def test_a_next_off_this_site_goes_to_assets(node):
    await logged_in(node)
    _, html = await page(node.client, "/assets")
    body, ctype = multipart([("csrf_token", csrf(html)), ("next", "https://evil.example/"),
                             ("file", "s.png", "image/png", image_bytes("PNG"))])
    r = await node.client.post("/assets/upload", data=body, headers={"Content-Type": ctype})
    assert r.status_code == 303 and r.headers["Location"] == "/assets"


@pytest.mark.parametrize("path", ["/studio", "/studio?capability=video.generate", "/assets", "/products/text-to-clip",
                                  "/keys", "/members", "/billing"])
async def test_no_token_in_any_address(node, path):
    await logged_in(node)
    r, html = await page(node.client, path)
    assert r.status_code == 200
    assert "csrf_token=" not in html and "form_token=" not in html


def test_notices_wait_ten_minutes_at_most_and_memory_is_bounded():
    from service.http import forms

    mem = forms.FormMemory()
    mem.add_notice("s1", {"text": "Key created.", "created": {"key": "aak_secret"}}, now=0.0)
    assert mem.take_notices("s1", now=forms.NOTICE_TTL + 1) == []  # too late: dropped
    mem.add_notice("s1", {"text": "old"}, now=0.0)
    mem.add_notice("s2", {"text": "new"}, now=forms.NOTICE_TTL + 1)  # s1's expired notice goes
    assert list(mem.notices) == ["s2"]
    for i in range(forms.MAX_SESSIONS + 5):
        mem.add_notice(f"x{i}", {"text": "n"}, now=1000.0)
    assert len(mem.notices) == forms.MAX_SESSIONS and "x0" not in mem.notices
    for i in range(forms.MAX_NOTICES + 3):
        mem.add_notice("many", {"text": str(i)}, now=1000.0)
    kept = [n["text"] for n in mem.take_notices("many", now=1000.0)]
    assert kept == [str(i) for i in range(3, forms.MAX_NOTICES + 3)]
    for i in range(forms.MAX_TOKENS + 5):
        mem.remember(("s", str(i)), "/keys")
    assert len(mem.tokens) == forms.MAX_TOKENS and ("s", "0") not in mem.tokens
