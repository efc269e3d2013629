async def test_healthz_and_org(node):
    r = await node.client.get("/healthz")
    assert r.status_code == 200
    assert await r.get_json() == {"status": "ok"}
    assert "X-Process-Time" in r.headers
    org = await node.create_org()
    r = await node.call("GET", "/v1/projects", org["api_key"])
    assert r.status_code == 200, await r.get_data(as_text=True)
    data = (await r.get_json())["data"]
    assert [p["slug"] for p in data] == ["default"]
