"""The OpenAI-compatible door in OpenAI's terms: a refusal names the field the client sent
(`input`, `messages`, never the node's `prompt`), a node's 5xx is a `server_error`, and a
JSON boolean is not an integer."""

from __future__ import annotations

import pytest
from conftest import j
from engine_support import engine_node

from service.errors import ApiError

IMAGES = "/openai/v1/images/generations"
CHAT = "/openai/v1/chat/completions"
SPEECH = "/openai/v1/audio/speech"
NOT_INT = "Input should be a valid integer."
# A chat model whose engine is never reached (taken as up): the submit rules refuse first.
CHAT_CATALOG = """
[[models]]
id = "chat"
capability = "text.llm"
backend = "openai"
resolutions = ["default"]
concurrency = 1
prices = [{ resolution = "default", credits = "1.00" }]
[models.engine]
url = "http://127.0.0.1:9"
model = "tiny"
"""


def refusal(message: str, param: str | None, type_: str = "invalid_request_error",
            code: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def held(node) -> int:
    return node.store.scalar("SELECT count(*) FROM credit_holds")


@pytest.mark.parametrize("text, message", [
    ("", "prompt is required."),
    ("x" * 10_001, "prompt must be at most 10000 characters; got 10001."),
])
async def test_a_speech_text_refusal_names_input(node, org, text, message):
    r = await node.call("POST", SPEECH, org["api_key"], json={"model": "espeak-ng", "input": text})
    assert (r.status_code, await j(r)) == (400, refusal(message, "input"))
    assert held(node) == 0


async def test_a_chat_prompt_refusal_names_messages(tmp_path, monkeypatch):
    async with engine_node(tmp_path, CHAT_CATALOG) as n:
        monkeypatch.setattr(n.parts.generation, "runnable", lambda m: True)
        key = (await n.create_org())["api_key"]
        body = {"model": "chat", "messages": [{"role": "user", "content": "x" * 10_001}]}
        r = await n.call("POST", CHAT, key, json=body)
        assert (r.status_code, await j(r)) == (
            400, refusal("prompt must be at most 10000 characters; got 10001.", "messages"))
        assert held(n) == 0


async def test_a_node_5xx_is_a_server_error(node, org, monkeypatch):
    async def failing_submit(*args, **kwargs):
        raise ApiError("Something went wrong on our side.", code="request.internal_error", status=500)

    monkeypatch.setattr(node.parts.generation, "submit", failing_submit)
    r = await node.call("POST", IMAGES, org["api_key"], json={"model": "proc-image", "prompt": "a fox"})
    assert (r.status_code, await j(r)) == (
        500, refusal("Something went wrong on our side.", None, "server_error", "internal_error"))


MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("path, body, param", [
    (IMAGES, {"model": "proc-image", "prompt": "fox", "n": True}, "n"),
    (CHAT, {"model": "chat", "messages": MESSAGES, "n": True}, "n"),
    (CHAT, {"model": "chat", "messages": MESSAGES, "max_tokens": True}, "max_tokens"),
    (CHAT, {"model": "chat", "messages": MESSAGES, "max_completion_tokens": True}, "max_completion_tokens"),
    (CHAT, {"model": "chat", "messages": MESSAGES, "seed": False}, "seed"),
])
async def test_a_boolean_is_not_an_integer(node, org, path, body, param):
    r = await node.call("POST", path, org["api_key"], json=body)
    assert (r.status_code, await j(r)) == (400, refusal(f"Invalid '{param}': {NOT_INT}", param))
    assert held(node) == 0
