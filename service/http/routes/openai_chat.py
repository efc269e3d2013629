"""`POST /openai/v1/chat/completions`: one text.llm job whose engine gets the whole
conversation (service/backends/base.py `ChatTurn`) and hands each piece of the reply back
as it reads it. Streamed, the pieces go out as OpenAI's `chat.completion.chunk` events
ending `data: [DONE]`; a client that leaves mid-stream cancels the job (its hold is
released and the engine's stream closed). The job's prompt, shown in `/v1/runs`, is the
last user message."""

from __future__ import annotations

from contextlib import aclosing

import json
from collections.abc import AsyncGenerator

from quart import Blueprint, Response
from quart_schema import hide

from service.catalog.request import SubmitRequest
from service.http.auth import node, principal, requires, resolve_project
from service.http.bodies import ClosingBody
from service.http.openai_compat import (ChatBody, FrontError, client_fields, install_errors, message_text, parse,
                                         translate)
from service.http.openai_jobs import WAIT_LIMIT, FrontJobs, job_failure, pick_model

bp = Blueprint("openai_chat", __name__)
install_errors(bp)


# A chat's conversation waits in memory with its queued job (Generation.chat_turns): bounded
# like a prompt, not only by the 1 MiB body. Its last user message meets the prompt limit too.
CONVERSATION_MAX_CHARS = 100_000
TOO_LONG = f"The messages are longer than {CONVERSATION_MAX_CHARS} characters in all."


def _conversation(data: ChatBody) -> tuple[list[dict], str]:
    messages = [{"role": "system" if m.role == "developer" else m.role, "content": message_text(m)}
                for m in data.messages]
    if sum(len(m["content"]) for m in messages) > CONVERSATION_MAX_CHARS:
        raise FrontError(400, TOO_LONG, param="messages")
    prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    if not prompt.strip():
        raise FrontError(400, "The messages need a non-empty user message.", param="messages")
    return messages, prompt


def _usage(st: dict) -> dict | None:
    u = st.get("usage")
    return {k: u.get(k, 0) for k in ("prompt_tokens", "completion_tokens", "total_tokens")} if u else None


@bp.post("/openai/v1/chat/completions")
@hide
@requires("generation:write", limit=WAIT_LIMIT)
async def chat():
    data = await parse(ChatBody)
    gen = node().generation
    m = pick_model(gen, data.model, "text.llm")
    messages, prompt = _conversation(data)
    project = resolve_project(None, write=True)
    calls = FrontJobs(gen, principal().org_id, project["id"])
    with client_fields(prompt="messages"):  # the job's prompt is the last user message
        plan = gen.plan(calls.org_id, project["id"], capability=None, model=m.id,
                        request=SubmitRequest(prompt=prompt, seed=data.seed))
    gen.check_active_limit(calls.org_id)
    turn = calls.chat_turn(messages, data.max_completion_tokens or data.max_tokens, data.temperature)
    try:
        job_id = await calls.submit(plan, turn)
    except BaseException:
        await calls.close()
        raise
    head = {"id": f"chatcmpl-{job_id}", "created": int(gen.clock.now()), "model": m.id}
    if data.stream:
        usage_wanted = bool(data.stream_options and data.stream_options.include_usage)
        # closed (its job cancelled unless it ended) even if its head never goes out: bodies.py
        return Response(ClosingBody(_stream(calls, head, turn, usage_wanted), calls.close), status=200,
                        content_type="text/event-stream", headers={"Cache-Control": "no-store"})
    try:
        pieces = []
        async with aclosing(calls.events()) as events:  # closed at once on a cancel, not by the GC
            async for kind, value in events:
                if kind == "text":
                    pieces.append(value)
        [st] = calls.ended.values()
        if st["status"] != "completed":
            raise job_failure(st)
        answer = {**head, "object": "chat.completion", "choices": [{
            "index": 0, "message": {"role": "assistant", "content": "".join(pieces)},
            "finish_reason": turn.finish_reason or "stop", "logprobs": None}]}
        usage = _usage(st)
        if usage is not None:
            answer["usage"] = usage
        return answer
    finally:
        await calls.close()


def _chunk(head: dict, delta: dict, finish: str | None = None) -> bytes:
    body = {**head, "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
    return f"data: {json.dumps(body)}\n\n".encode()


async def _stream(calls: FrontJobs, head: dict, turn, usage_wanted: bool) -> AsyncGenerator[bytes, None]:
    """The chunks; `calls` is closed by the ClosingBody around it."""
    yield _chunk(head, {"role": "assistant", "content": ""})
    async with aclosing(calls.events()) as events:  # closed at once when the client leaves
        async for kind, value in events:
            if kind == "text":
                yield _chunk(head, {"content": value})
    [st] = calls.ended.values()
    if st["status"] != "completed":
        front, _ = translate(job_failure(st))
        err = {"message": front.message, "type": front.type, "param": front.param, "code": front.code}
        yield f"data: {json.dumps({'error': err})}\n\n".encode()
        return
    yield _chunk(head, {}, turn.finish_reason or "stop")
    usage = _usage(st)
    if usage_wanted and usage is not None:
        yield f"data: {json.dumps({**head, 'object': 'chat.completion.chunk', 'choices': [], 'usage': usage})}\n\n".encode()
    yield b"data: [DONE]\n\n"
