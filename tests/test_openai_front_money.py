"""The OpenAI-compatible door: an API key's spend limit holds there as on `/v1`,
and malformed bodies are OpenAI-shaped 400s, never 500s, with nothing held."""

from __future__ import annotations

import pytest
from conftest import j

IMAGES = "/openai/v1/images/generations"
CHAT = "/openai/v1/chat/completions"
KEY_LIMIT = {"message": "This API key's spend limit is reached.", "type": "insufficient_quota",
             "param": None, "code": "insufficient_quota"}


async def new_key(node, owner_key: str, spend_limit: str) -> dict:
    r = await node.call("POST", "/v1/api-keys", owner_key, json={"name": "sdk", "spend_limit": spend_limit})
    assert r.status_code == 201, await j(r)
    return (await j(r))["data"]


async def key_spent(node, owner_key: str, key_id: str) -> str:
    r = await node.call("GET", "/v1/api-keys", owner_key)
    return {k["id"]: k["spent"] for k in (await j(r))["data"]}[key_id]


def holds(node) -> list[tuple[int, str]]:
    return [(r["amount_uc"], r["status"]) for r in node.store.all(
        "SELECT amount_uc, status FROM credit_holds ORDER BY created_at")]


async def test_a_key_spend_limit_holds_on_the_openai_door(node, org):
    owner = org["api_key"]
    sdk = await new_key(node, owner, "1.50")
    r = await node.call("POST", IMAGES, sdk["key"], json={"model": "proc-image", "prompt": "a fox"})
    assert r.status_code == 200 and len((await j(r))["data"]) == 1
    assert await key_spent(node, owner, sdk["id"]) == "1.00"
    r = await node.call("POST", IMAGES, sdk["key"], json={"model": "proc-image", "prompt": "a fox"})
    assert (r.status_code, await j(r)) == (429, {"error": KEY_LIMIT})
    assert holds(node) == [(1_000_000, "captured")]
    assert await key_spent(node, owner, sdk["id"]) == "1.00"


async def test_n_images_past_a_key_limit_release_the_first_and_give_its_room_back(node, org):
    owner = org["api_key"]
    sdk = await new_key(node, owner, "1.50")
    r = await node.call("POST", IMAGES, sdk["key"], json={"model": "proc-image", "prompt": "a fox", "n": 2})
    assert (r.status_code, await j(r)) == (429, {"error": KEY_LIMIT})
    assert holds(node) == [(1_000_000, "released")]
    assert await key_spent(node, owner, sdk["id"]) == "0.00"
    r = await node.call("POST", IMAGES, sdk["key"], json={"model": "proc-image", "prompt": "a fox"})
    assert r.status_code == 200
    assert await key_spent(node, owner, sdk["id"]) == "1.00"


NOT_JSON = "We could not parse the JSON body of your request."
SURROGATE = "We could not parse the JSON body of your request: a string holds an unpaired surrogate."


def bad_size(size: str) -> str:
    return f"Invalid size '{size}': expected WIDTHxHEIGHT, such as 1024x1024."


@pytest.mark.parametrize("path, body, message, param", [
    (CHAT, b'{"model": "m", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", NOT_JSON, None),
    (IMAGES, b'{"prompt": "fox", "size": ' + b"[" * 5000 + b"]" * 5000 + b"}", NOT_JSON, None),
    (IMAGES, b"\xff\xfe{}", NOT_JSON, None),
    # not JSON, though Python's parser takes them: a NaN temperature was "less than or equal to 2"
    (CHAT, b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', NOT_JSON, None),
    (IMAGES, b'{"model": "proc-image", "prompt": "fox", "quality": -Infinity}', NOT_JSON, None),
    (IMAGES, b'{"model": "proc-image", "prompt": "\\ud800 fox"}', SURROGATE, None),
    (IMAGES, '{"model": "proc-image", "prompt": "fox", "size": "²x1"}'.encode(), bad_size("²x1"), "size"),
    (IMAGES, b'{"model": "proc-image", "prompt": "fox", "size": "1x' + b"9" * 400 + b'"}',
     bad_size("1x" + "9" * 400), "size"),
    (IMAGES, b'{"model": "proc-image", "prompt": "fox", "size": "' + b"9" * 400 + b'x1"}',
     bad_size("9" * 400 + "x1"), "size"),
    (IMAGES, b'{"model": "proc-image", "prompt": "fox", "size": "' + b"9" * 5000 + b'x1"}',
     bad_size("9" * 5000 + "x1"), "size"),
])
async def test_malformed_bodies_are_400_in_openai_shape(node, org, path, body, message, param):
    r = await node.call("POST", path, org["api_key"], data=body, headers={"Content-Type": "application/json"})
    assert (r.status_code, await j(r)) == (400, {"error": {
        "message": message, "type": "invalid_request_error", "param": param, "code": "invalid_request_error"}})
    assert holds(node) == []
