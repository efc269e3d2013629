"""The OpenAI-compatible front door's shapes (spec "OpenAI-compatible front door"): request
bodies, OpenAI's error envelope for every refusal the node can give, and the mapping of
an OpenAI `size` to a model's aspect ratio and tier. Routes: service/http/routes/openai_*.py.

Errors are `{"error": {message, type, param, code}}`: 401 `invalid_api_key`, 404
`model_not_found`, 400 `invalid_request_error` (the node's 400 and 422), 429
`insufficient_quota` where `/v1` answers 402 (credits or a spend limit), 429
`rate_limit_exceeded` (with Retry-After), 503 for an unavailable model or a busy node.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError
from quart import Blueprint, Response, jsonify, request

from service.catalog.capabilities import capability as capability_of
from service.catalog.catalog import Model
from service.errors import ActorGone, ApiError, AskTimeout, RateLimited
from service.http.errors import AuthFailure, RouteTimeout
from service.http.schemas import NotJson, decode_json

log = logging.getLogger("service.http")

MAX_IMAGES = 4
NOT_JSON = "We could not parse the JSON body of your request."
SURROGATE = f"{NOT_JSON[:-1]}: a string holds an unpaired surrogate."  # SQLite cannot store one: a 500 later
SIZE = re.compile(r"([0-9]{1,5})x([0-9]{1,5})")  # ASCII digits, bounded: no overflow in the ratio


class FrontError(Exception):
    """A refusal already in OpenAI's terms."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 code: str | None = "invalid_request_error", param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type_, code, param


def model_not_found(model_id: str) -> FrontError:
    return FrontError(404, f"The model '{model_id}' does not exist or you do not have access to it.",
                      code="model_not_found", param="model")


B = TypeVar("B", bound=BaseModel)


def _not_bool(v: Any) -> Any:
    if isinstance(v, bool):  # lax pydantic reads `true` as 1
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return v


Int = Annotated[int, BeforeValidator(_not_bool)]
"""An integer field: a JSON boolean is refused, not read as 0 or 1."""


class Loose(BaseModel):
    """OpenAI clients send fields this node has no use for (`user`, `top_p`, ...): ignored."""

    model_config = ConfigDict(extra="ignore")


class ImagesBody(Loose):
    prompt: str
    model: str | None = None
    n: Int = Field(default=1, ge=1, le=MAX_IMAGES)
    size: str | None = None
    response_format: Literal["url", "b64_json"] | None = None


class Message(Loose):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[dict[str, Any]]


class StreamOptions(Loose):
    include_usage: bool = False


class ChatBody(Loose):
    model: str
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Int | None = Field(default=None, ge=1)
    max_completion_tokens: Int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    seed: Int | None = Field(default=None, ge=0, le=2 ** 31 - 1)
    n: Int = Field(default=1, ge=1, le=1)


class SpeechBody(Loose):
    model: str
    input: str
    voice: str | None = None
    response_format: Literal["wav"] = "wav"


async def parse(model: type[B]) -> B:
    """The JSON body as `model`, or a 400 naming the first bad field as `param`."""
    raw = await request.get_data(cache=True, as_text=False, parse_form_data=False)
    try:  # the decoding of `/v1` bodies (schemas.decode_json), worded in OpenAI's terms
        data = decode_json(raw) if raw.strip() else None
    except NotJson as e:
        raise FrontError(400, SURROGATE if e.kind == "surrogate" else NOT_JSON) from None
    if not isinstance(data, dict):
        raise FrontError(400, "The request body must be a JSON object.")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = [str(p) for p in first["loc"]]
        raise FrontError(400, f"Invalid '{'.'.join(loc)}': {first['msg']}.", param=loc[0] if loc else None) from None


def message_text(m: Message) -> str:
    """A message's text: a string, or the text parts of a list (other parts are refused)."""
    if isinstance(m.content, str):
        return m.content
    texts = []
    for part in m.content:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise FrontError(400, "Only text message parts are supported.", param="messages")
        texts.append(part["text"])
    return "".join(texts)


def size_to_tier(model: Model, size: str | None) -> dict:
    """`WxH` -> the capability's nearest aspect ratio and the smallest of the model's tiers
    whose long side holds it (the largest when none does); `auto`/absent: the defaults."""
    if size is None or size == "auto":
        return {}
    m = SIZE.fullmatch(size)
    if m is None or int(m[1]) == 0 or int(m[2]) == 0:
        raise FrontError(400, f"Invalid size '{size}': expected WIDTHxHEIGHT, such as 1024x1024.", param="size")
    width, height = int(m[1]), int(m[2])
    out: dict = {}
    cap = capability_of(model.capability)
    if cap is not None and cap.aspect_ratios:
        def distance(ratio: str) -> float:
            a, b = (int(x) for x in ratio.split(":"))
            return abs(math.log((a / b) / (width / height)))
        out["aspect_ratio"] = min(cap.aspect_ratios, key=distance)
    sides = {"1k": 1024, "2k": 2048, "4k": 4096}
    tiers = sorted((sides[r], r) for r in model.resolutions if r in sides)
    if tiers:
        out["resolution"] = next((r for side, r in tiers if side >= max(width, height)), tiers[-1][1])
    return out


def error_response(e: FrontError, headers: dict | None = None) -> tuple[Response, int, dict]:
    body = {"error": {"message": e.message, "type": e.type, "param": e.param, "code": e.code}}
    return jsonify(body), e.status, headers or {}


def translate(e: Exception) -> tuple[FrontError, dict]:
    """Any refusal of the node -> OpenAI's terms (and the headers to keep)."""
    if isinstance(e, FrontError):
        return e, {}
    if isinstance(e, AuthFailure):
        if e.status == 401:
            return FrontError(401, "Incorrect API key provided.", code="invalid_api_key"), {}
        return FrontError(403, "The API key's role does not allow this request.", code="permission_denied"), {}
    if isinstance(e, RateLimited):
        return (FrontError(429, e.message, "requests", "rate_limit_exceeded"),
                {"Retry-After": str(e.retry_after)})
    if isinstance(e, ApiError):
        param = (e.details or {}).get("field") if isinstance(e.details, dict) else None
        if e.status == 402:
            return FrontError(429, e.message, "insufficient_quota", "insufficient_quota"), {}
        if e.status in (400, 422):
            return FrontError(400, e.message, param=param), {}
        if e.status == 503:
            return FrontError(503, e.message, "server_error", "model_unavailable"), {}
        if e.status == 404:
            return FrontError(404, e.message, code="not_found"), {}
        type_ = "server_error" if e.status >= 500 else "invalid_request_error"
        return FrontError(e.status, e.message, type_, code=e.code.rpartition(".")[2]), {}
    if isinstance(e, RouteTimeout):
        return FrontError(408, f"The request took longer than {e.seconds} seconds.", "server_error", "timeout"), {}
    if isinstance(e, (ActorGone, AskTimeout)):
        return FrontError(503, "The service is busy; try again shortly.", "server_error", "service_unavailable"), {}
    log.exception("internal error in the OpenAI-compatible front door")
    return FrontError(500, "Something went wrong on our side.", "server_error", "internal_error"), {}


@contextmanager
def client_fields(**names: str) -> Iterator[None]:
    """The submit rules name their own fields (`prompt`); the client sent OpenAI's (a speech's
    `input`, a chat's `messages`): its refusal's `param` names the latter."""
    try:
        yield
    except ApiError as e:
        field = e.details.get("field") if isinstance(e.details, dict) else None
        if field not in names:
            raise
        front, _ = translate(e)
        front.param = names[field]
        raise front from None


def install_errors(bp: Blueprint) -> None:
    """Every exception a front-door view raises is answered in OpenAI's shape."""

    @bp.errorhandler(Exception)
    async def on_error(e: Exception):
        front, headers = translate(e)
        return error_response(front, headers)
