"""A project's slug is never written like a project id: routes take a project by id or slug
(paths, `project_id`, X-Service-Project), so within an organization a slug equal to another
project's id would make that value name two projects. Refused at create and at rename with
the shape of the other bad slugs (422 `request.validation_failed`, details `{slug}`)."""

from __future__ import annotations

import html as htmllib

import pytest

from conftest import err, j
from service.http.routes.projects import SLUG_LOOKS_LIKE_ID
from tests.pages import csrf, page
from tests.test_dash_forms import form_token
from tests.test_dashboard_http import logged_in

MESSAGE = "slug must not look like a project id."
OLD_RULE = ("slug must be 1 to 64 lowercase letters, digits and hyphens, "
            "and cannot start or end with a hyphen.")


def refused(slug: str) -> dict:
    return {"code": "request.validation_failed", "message": MESSAGE, "details": {"slug": slug}}


async def create(node, key, **body):
    return await node.call("POST", "/v1/projects", key, json={"name": "x", **body})


def test_the_message_is_the_documented_one():
    assert SLUG_LOOKS_LIKE_ID == MESSAGE


async def test_create_refuses_a_slug_written_like_a_project_id(node):
    org = await node.create_org()
    key = org["api_key"]
    other = org["default_project_id"]  # an id of this organization
    before = node.store.scalar("SELECT count(*) FROM projects")
    for slug in (other, "00000000-0000-0000-0000-000000000000", "0d6f3b8e-6c1a-4f6e-9a3e-2b7c1d4e5f60"):
        r = await create(node, key, slug=slug)
        assert r.status_code == 422, slug
        assert err(await j(r)) == refused(slug)
    assert node.store.scalar("SELECT count(*) FROM projects") == before
    # an upper-case id is already no slug (the other rule, unchanged)
    r = await create(node, key, slug=other.upper())
    assert (r.status_code, err(await j(r))) == (422, {"code": "request.validation_failed", "message": OLD_RULE,
                                                      "details": {"slug": other.upper()}})
    # near misses are ordinary slugs: they cannot equal an id
    for slug in (other.replace("-", ""), other[:-1], other + "-2", "project-" + other):
        r = await create(node, key, slug=slug)
        assert r.status_code == 201, slug
        assert (await j(r))["data"]["slug"] == slug


async def test_rename_refuses_a_slug_written_like_a_project_id(node):
    org = await node.create_org()
    key = org["api_key"]
    a = (await j(await create(node, key, name="Alpha", slug="alpha")))["data"]
    b = (await j(await create(node, key, name="Beta", slug="beta")))["data"]
    r = await node.call("PATCH", f"/v1/projects/{b['id']}", key, json={"slug": a["id"]})
    assert r.status_code == 422
    assert err(await j(r)) == refused(a["id"])
    r = await node.call("PATCH", "/v1/projects/beta", key, json={"name": "Beta 2", "slug": b["id"]})
    assert r.status_code == 422
    assert err(await j(r)) == refused(b["id"])
    got = (await j(await node.call("GET", f"/v1/projects/{b['id']}", key)))["data"]
    assert (got["name"], got["slug"], got["updated_at"]) == ("Beta", "beta", None)  # nothing changed
    assert (await j(await node.call("GET", f"/v1/projects/{a['id']}", key)))["data"]["slug"] == "alpha"
    r = await node.call("PATCH", f"/v1/projects/{b['id']}", key, json={"slug": "beta-2"})
    assert (r.status_code, (await j(r))["data"]["slug"]) == (200, "beta-2")


@pytest.mark.usefixtures("cheap_hashes")
async def test_the_dashboard_form_refuses_it_too(node):
    await logged_in(node)
    _, html = await page(node.client, "/projects")
    org_id = node.store.scalar("SELECT organization_id FROM projects LIMIT 1")
    taken = node.store.scalar("SELECT id FROM projects WHERE organization_id = ? AND is_default = 1", (org_id,))
    form = {"csrf_token": csrf(html), "form_token": form_token(html), "name": "Campaign", "slug": taken}
    r = await node.client.post("/projects", form=form)
    assert r.status_code == 422
    assert MESSAGE in htmllib.unescape(await r.get_data(as_text=True))
    assert node.store.scalar("SELECT count(*) FROM projects WHERE name = 'Campaign'") == 0


async def test_a_name_written_like_an_id_derives_a_slug_that_is_not_one(node):
    org = await node.create_org()
    other = org["default_project_id"]
    r = await node.call("POST", "/v1/projects", org["api_key"], json={"name": other})
    assert r.status_code == 201
    assert (await j(r))["data"]["slug"] == "project-" + other


# -- bounds on names and descriptions (a name lands in mail subjects and pages) ------------------
async def test_project_name_and_description_bounds(node):
    from conftest import err, j
    from service.actors.accounts.actor import PROJECT_DESCRIPTION_MAX, PROJECT_NAME_LENGTH

    org = await node.create_org()
    key, default = org["api_key"], org["default_project_id"]
    cases = [
        ({"name": "n" * 201}, PROJECT_NAME_LENGTH, {"field": "name"}),
        ({"name": "ok", "description": "d" * (PROJECT_DESCRIPTION_MAX + 1)},
         f"description must be at most {PROJECT_DESCRIPTION_MAX} characters.",
         {"field": "description", "max_length": PROJECT_DESCRIPTION_MAX}),
    ]
    for body, message, details in cases:
        for method, path in (("POST", "/v1/projects"), ("PATCH", f"/v1/projects/{default}")):
            r = await node.call(method, path, key, json=body)
            assert r.status_code == 422, (method, body)
            assert err(await j(r)) == {"code": "request.validation_failed", "message": message, "details": details}
    r = await node.call("POST", "/v1/projects", key, json={"name": "n" * 200, "description": "d" * PROJECT_DESCRIPTION_MAX})
    assert r.status_code == 201
