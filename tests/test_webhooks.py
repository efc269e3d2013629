"""Account-webhook records over HTTP (spec "Account webhooks", "Events" subscription rules,
permissions table, Errors): shapes, pagination, validation codes and details, permissions.

No events fire to these webhooks' URLs (they point at 127.0.0.1 and the node refuses private
addresses), so nothing leaves the test process."""

import pytest

from service.actors.delivery import EVENT_NAMES
from conftest import err, j

FORBIDDEN = {"status": False, "error": "Forbidden"}
URL = "https://127.0.0.1:9/hooks/a"
ALL_EVENTS = [
    "member.invited", "member.joined", "member.role_changed", "member.removed",
    "api_key.created", "api_key.revoked",
    "support.ticket.opened", "support.ticket.replied", "support.ticket.state_changed",
    "billing.credits_low", "billing.spend_limit_reached", "webhook.test",
]
RECORD_FIELDS = {"id", "url", "events", "description", "is_active", "created_at", "updated_at"}


async def create(node, key, **over):
    payload = {"url": URL, "events": ["member.removed"], "description": "ops"} | over
    r = await node.call("POST", "/v1/webhooks", key, json=payload)
    assert r.status_code == 201, await r.get_data(as_text=True)
    return (await j(r))["webhook"]


# -- records -----------------------------------------------------------------------------------
async def test_create_answers_the_record_and_the_secret_once(node):
    org = await node.create_org()
    key = org["api_key"]
    hook = await create(node, key, events=["api_key.created", "member.joined"])
    assert set(hook) == RECORD_FIELDS | {"secret"}
    assert hook["url"] == URL and hook["events"] == ["api_key.created", "member.joined"]
    assert hook["description"] == "ops" and hook["is_active"] is True
    assert hook["created_at"].endswith("Z") and hook["updated_at"] == hook["created_at"]
    assert hook["secret"].startswith("whsec_") and len(hook["secret"]) == 6 + 64

    r = await node.call("GET", f"/v1/webhooks/{hook['id']}", key)
    assert r.status_code == 200
    got = (await j(r))["webhook"]
    assert set(got) == RECORD_FIELDS and "secret" not in got
    assert got == {k: v for k, v in hook.items() if k != "secret"}
    listed = (await j(await node.call("GET", "/v1/webhooks", key)))["webhooks"]
    assert "secret" not in listed[0] and listed[0]["id"] == hook["id"]
    # kept to sign with, sealed with the node key (never in clear at rest)
    stored = node.store.scalar("SELECT secret FROM webhooks WHERE id = ?", (hook["id"],))
    assert stored != hook["secret"] and hook["secret"] not in stored
    assert node.parts.node_key.open(stored) == hook["secret"]


async def test_description_is_optional_and_null_when_absent(node):
    org = await node.create_org()
    r = await node.call("POST", "/v1/webhooks", org["api_key"], json={"url": URL, "events": ["member.joined"]})
    assert r.status_code == 201
    assert (await j(r))["webhook"]["description"] is None


async def test_duplicate_event_names_are_kept_once(node):
    org = await node.create_org()
    hook = await create(node, org["api_key"], events=["member.joined", "member.joined", "api_key.revoked"])
    assert hook["events"] == ["member.joined", "api_key.revoked"]


async def test_events_lists_every_valid_name(node):
    org = await node.create_org()
    r = await node.call("GET", "/v1/webhooks/events", org["api_key"])
    assert r.status_code == 200
    assert await j(r) == {"events": ALL_EVENTS}
    assert list(EVENT_NAMES) == ALL_EVENTS


async def test_events_path_is_not_a_webhook_id(node):
    """`/v1/webhooks/events` is only the static route (OpenAPI: concrete paths win over
    `/v1/webhooks/{webhook_id}`): other methods there are 405, and OPTIONS advertises GET."""
    org = await node.create_org()
    for method in ("PATCH", "DELETE"):
        r = await node.call(method, "/v1/webhooks/events", org["api_key"], json={})
        assert r.status_code == 405, method
        assert set(r.headers["Allow"].split(", ")) == {"GET", "HEAD", "OPTIONS"}
    r = await node.call("OPTIONS", "/v1/webhooks/events", org["api_key"])
    assert set(r.headers["Allow"].split(", ")) == {"GET", "HEAD", "OPTIONS"}
    hook = await create(node, org["api_key"])
    r = await node.call("GET", f"/v1/webhooks/{hook['id']}", org["api_key"])
    assert r.status_code == 200


async def test_list_pages_with_limit_offset_and_total_newest_first(node):
    org = await node.create_org()
    key = org["api_key"]
    ids = [(await create(node, key, description=f"h{i}"))["id"] for i in range(5)]
    newest_first = ids[::-1]

    async def page(qs):
        r = await node.call("GET", f"/v1/webhooks{qs}", key)
        assert r.status_code == 200, await r.get_data(as_text=True)
        b = await j(r)
        assert set(b) == {"webhooks", "total"}
        return [w["id"] for w in b["webhooks"]], b["total"]

    assert await page("") == (newest_first, 5)
    assert await page("?limit=2") == (newest_first[:2], 5)
    assert await page("?limit=2&offset=2") == (newest_first[2:4], 5)
    assert await page("?limit=2&offset=4") == (newest_first[4:], 5)
    assert await page("?offset=10") == ([], 5)
    assert await page("?limit=0") == (newest_first[:1], 5)      # clamped to 1
    assert await page("?limit=5000") == (newest_first, 5)       # clamped to 200
    assert await page("?offset=-3") == (newest_first, 5)        # clamped to 0
    r = await node.call("GET", "/v1/webhooks?limit=abc", key)
    assert r.status_code == 400 and err(await j(r))["code"] == "request.bad_request"
    r = await node.call("GET", "/v1/webhooks?page=2", key)
    assert r.status_code == 400 and err(await j(r))["code"] == "request.bad_request"


async def test_other_organizations_webhooks_are_invisible(node):
    a = await node.create_org("A", "a@a.test")
    b = await node.create_org("B", "b@b.test")
    hook = await create(node, a["api_key"])
    for method, path, body in (("GET", "", None), ("PATCH", "", {"description": "x"}), ("DELETE", "", None),
                               ("POST", "/test", None), ("GET", "/deliveries", None)):
        r = await node.call(method, f"/v1/webhooks/{hook['id']}{path}", b["api_key"], json=body)
        assert r.status_code == 404, (method, path)
        assert err(await j(r)) == {"code": "webhook.not_found", "message": "Webhook not found."}
    assert (await j(await node.call("GET", "/v1/webhooks", b["api_key"]))) == {"webhooks": [], "total": 0}


async def test_unknown_webhook_is_404_webhook_not_found(node):
    org = await node.create_org()
    for method, path, body in (("GET", "", None), ("PATCH", "", {"is_active": False}), ("DELETE", "", None),
                               ("POST", "/test", None), ("GET", "/deliveries", None)):
        r = await node.call(method, f"/v1/webhooks/00000000-0000-0000-0000-000000000000{path}",
                            org["api_key"], json=body)
        assert r.status_code == 404
        assert err(await j(r))["code"] == "webhook.not_found"


async def test_patch_changes_fields_and_updated_at(node):
    org = await node.create_org()
    key = org["api_key"]
    hook = await create(node, key)
    new_url = "https://127.0.0.1:9/hooks/b"
    r = await node.call("PATCH", f"/v1/webhooks/{hook['id']}", key,
                        json={"url": new_url, "events": ["api_key.revoked"], "description": "new",
                              "is_active": False})
    assert r.status_code == 200, await r.get_data(as_text=True)
    got = (await j(r))["webhook"]
    assert set(got) == RECORD_FIELDS
    assert (got["url"], got["events"], got["description"], got["is_active"]) == (
        new_url, ["api_key.revoked"], "new", False)
    assert got["created_at"] == hook["created_at"] and got["updated_at"] >= hook["updated_at"]
    r = await node.call("PATCH", f"/v1/webhooks/{hook['id']}", key, json={"is_active": True})
    assert (await j(r))["webhook"]["is_active"] is True
    r = await node.call("PATCH", f"/v1/webhooks/{hook['id']}", key, json={})
    assert r.status_code == 200 and (await j(r))["webhook"]["url"] == new_url
    r = await node.call("PATCH", f"/v1/webhooks/{hook['id']}", key, json={"description": None})
    assert (await j(r))["webhook"]["description"] is None


async def test_delete_is_204_and_repeatable(node):
    org = await node.create_org()
    key = org["api_key"]
    hook = await create(node, key)
    r = await node.call("DELETE", f"/v1/webhooks/{hook['id']}", key)
    assert r.status_code == 204 and await r.get_data() == b""
    r = await node.call("GET", f"/v1/webhooks/{hook['id']}", key)
    assert r.status_code == 404
    r = await node.call("DELETE", f"/v1/webhooks/{hook['id']}", key)
    assert r.status_code == 204
    r = await node.call("PATCH", f"/v1/webhooks/{hook['id']}", key, json={"is_active": True})
    assert r.status_code == 404
    assert (await j(await node.call("GET", "/v1/webhooks", key)))["total"] == 0


# -- validation -----------------------------------------------------------------------------------
INVALID_URLS = ["not a url", "ftp://example.com/hook", "https://", "https:///path", "/relative/path",
                "example.com/hook", "", "mailto:ops@example.com", "https://exa mple.com/",
                "https://example.com:99999/", " https://example.com/", "javascript:alert(1)",
                "https://" + "a" * 2100 + ".com/"]


@pytest.mark.parametrize("url", INVALID_URLS)
async def test_invalid_url_is_422_on_create_and_patch(node, url):
    org = await node.create_org()
    key = org["api_key"]
    r = await node.call("POST", "/v1/webhooks", key, json={"url": url, "events": ["member.joined"]})
    assert r.status_code == 422
    e = err(await j(r))
    assert e["code"] == "webhook.invalid_url" and e["details"] == {"url": url}
    hook = await create(node, key)
    r = await node.call("PATCH", f"/v1/webhooks/{hook['id']}", key, json={"url": url})
    assert r.status_code == 422 and err(await j(r))["code"] == "webhook.invalid_url"
    assert (await j(await node.call("GET", f"/v1/webhooks/{hook['id']}", key)))["webhook"]["url"] == URL


@pytest.mark.parametrize("url", ["http://example.com/hook", "HTTP://example.com/", "http://10.0.0.1:8080/x"])
async def test_http_url_is_422_insecure(node, url):
    org = await node.create_org()
    key = org["api_key"]
    r = await node.call("POST", "/v1/webhooks", key, json={"url": url, "events": ["member.joined"]})
    assert r.status_code == 422
    e = err(await j(r))
    assert e["code"] == "webhook.insecure_url" and e["details"] == {"url": url}
    hook = await create(node, key)
    r = await node.call("PATCH", f"/v1/webhooks/{hook['id']}", key, json={"url": url})
    assert r.status_code == 422 and err(await j(r))["code"] == "webhook.insecure_url"


@pytest.mark.parametrize("url", ["https://example.com/hook", "https://hooks.example.com:8443/a/b?c=d",
                                 "https://[2001:db8::1]/x", "HTTPS://EXAMPLE.com/"])
async def test_valid_https_urls_are_accepted(node, url):
    org = await node.create_org()
    r = await node.call("POST", "/v1/webhooks", org["api_key"], json={"url": url, "events": ["billing.credits_low"]})
    assert r.status_code == 201, await r.get_data(as_text=True)
    assert (await j(r))["webhook"]["url"] == url


async def test_unknown_events_are_422_with_details(node):
    org = await node.create_org()
    key = org["api_key"]
    r = await node.call("POST", "/v1/webhooks", key,
                        json={"url": URL, "events": ["member.joined", "job.completed", "nope", "nope"]})
    assert r.status_code == 422
    e = err(await j(r))
    assert e["code"] == "webhook.unknown_events"
    assert e["details"] == {"unknown_events": ["job.completed", "nope"], "allowed_events": ALL_EVENTS}
    hook = await create(node, key)
    r = await node.call("PATCH", f"/v1/webhooks/{hook['id']}", key, json={"events": ["Member.Joined"]})
    assert r.status_code == 422
    assert err(await j(r))["details"] == {"unknown_events": ["Member.Joined"], "allowed_events": ALL_EVENTS}
    assert (await j(await node.call("GET", f"/v1/webhooks/{hook['id']}", key)))["webhook"]["events"] == [
        "member.removed"]


async def test_empty_events_is_422_validation_failed(node):
    org = await node.create_org()
    r = await node.call("POST", "/v1/webhooks", org["api_key"], json={"url": URL, "events": []})
    assert r.status_code == 422
    e = err(await j(r))
    assert e["code"] == "request.validation_failed" and e["details"]["field"] == "events"


@pytest.mark.parametrize("payload,key", [
    ({"events": ["member.joined"]}, "url"),
    ({"url": URL}, "events"),
    ({"url": URL, "events": "member.joined"}, "events"),
    ({"url": URL, "events": [1]}, "events.0"),
    ({"url": 5, "events": ["member.joined"]}, "url"),
    ({"url": URL, "events": ["member.joined"], "secret": "mine"}, "secret"),
    ({"url": URL, "events": ["member.joined"], "is_active": False}, "is_active"),
])
async def test_schema_violations_are_400(node, payload, key):
    org = await node.create_org()
    r = await node.call("POST", "/v1/webhooks", org["api_key"], json=payload)
    assert r.status_code == 400
    e = err(await j(r))
    assert e["code"] == "request.validation_failed"
    assert key in [x["key"] for x in e["details"]["errors"]]
    assert all(x["source"] == "body" for x in e["details"]["errors"])


async def test_patch_schema_violations_are_400(node):
    org = await node.create_org()
    hook = await create(node, org["api_key"])
    for payload in ({"is_active": "no"}, {"secret": "x"}, {"events": "member.joined"}):
        r = await node.call("PATCH", f"/v1/webhooks/{hook['id']}", org["api_key"], json=payload)
        assert r.status_code == 400 and err(await j(r))["code"] == "request.validation_failed", payload


# -- permissions (spec table: read = owner, admin, read_only; writes = owner, admin) ----------------
ROUTES = [
    ("GET", "/v1/webhooks", None, "webhooks:read"),
    ("GET", "/v1/webhooks/{id}", None, "webhooks:read"),
    ("GET", "/v1/webhooks/events", None, "webhooks:read"),
    ("GET", "/v1/webhooks/{id}/deliveries", None, "webhooks:read"),
    ("POST", "/v1/webhooks", {"url": URL, "events": ["member.joined"]}, "webhooks:create"),
    ("PATCH", "/v1/webhooks/{id}", {"description": "x"}, "webhooks:update"),
    ("POST", "/v1/webhooks/{id}/test", None, "webhooks:update"),
    ("DELETE", "/v1/webhooks/{id}", None, "webhooks:delete"),
]
ALLOWED = {"webhooks:read": {"owner", "admin", "read_only"}, "webhooks:create": {"owner", "admin"},
           "webhooks:update": {"owner", "admin"}, "webhooks:delete": {"owner", "admin"}}


@pytest.mark.parametrize("role", ["owner", "admin", "member", "read_only"])
async def test_permissions_follow_the_spec_table(node, role):
    org = await node.create_org()
    key = org["api_key"] if role == "owner" else (await node.add_member(org["organization_id"], role))["api_key"]
    for method, path, body, permission in ROUTES:
        hook = await create(node, org["api_key"])
        r = await node.call(method, path.replace("{id}", hook["id"]), key, json=body)
        if role in ALLOWED[permission]:
            assert r.status_code in (200, 201, 204), (role, method, path, r.status_code)
        else:
            assert r.status_code == 403, (role, method, path)
            assert await j(r) == FORBIDDEN


async def test_no_key_is_401(node):
    r = await node.call("GET", "/v1/webhooks", None)
    assert r.status_code == 401 and await j(r) == {"status": False, "error": "Unauthorized"}


async def test_the_test_call_answers_the_same_for_every_refused_destination(node):
    """A host that resolves to a refused address and one that does not resolve at all give
    the same answer, so the test call cannot map which internal names exist."""
    import socket as stdlib_socket

    import trio

    class Names(trio.abc.HostnameResolver):
        async def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):
            name = host.decode() if isinstance(host, bytes) else host
            if name == "db.internal":
                return [(stdlib_socket.AF_INET, stdlib_socket.SOCK_STREAM, 6, "", ("10.1.2.3", int(port)))]
            raise stdlib_socket.gaierror(stdlib_socket.EAI_NONAME, "unknown name")

        async def getnameinfo(self, sockaddr, flags):
            raise NotImplementedError

    trio.socket.set_custom_hostname_resolver(Names())
    try:
        org = await node.create_org()
        answers = []
        for url in ("https://db.internal/hook", "https://nowhere.internal/hook", "https://10.1.2.3/hook",
                    "https://127.0.0.1:9/hook"):
            hook = await create(node, org["api_key"], url=url, events=["webhook.test"])
            r = await node.call("POST", f"/v1/webhooks/{hook['id']}/test", org["api_key"])
            assert r.status_code == 201
            delivery = dict((await j(r))["delivery"])
            assert delivery.pop("url") == url
            delivery.pop("duration_ms"), delivery.pop("id")
            answers.append(delivery)
        assert answers == [{"is_delivered": False, "status_code": None, "error": "address not allowed"}] * 4
    finally:
        trio.socket.set_custom_hostname_resolver(None)
