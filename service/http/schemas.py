"""Request parsing with pydantic, documented in the OpenAPI document through quart-schema.

`body(Model)` and `query(Model)` record the model for OpenAPI and parse the request
themselves so every failure has the spec's shape: invalid JSON (or non-UTF-8) is 400
`request.bad_request`; a wrong type, missing or unknown field is 400
`request.validation_failed` with `details.errors[] = {message, key, source}`.

`NaN`, `Infinity` and `-Infinity`, which are not JSON but which Python's parser takes, are
400 `request.bad_request` on every body.

Hostile JSON (tests/test_hostile_input.py): nesting past the interpreter's recursion limit,
an integer of more than 4,300 digits, and a string holding an unpaired UTF-16 surrogate
escape (`"\\ud800"`: valid JSON syntax, but not text, and SQLite cannot store it) are all
400 `request.bad_request`. An integer query parameter outside SQLite's 64-bit range is 400.

A body class is the one declaration of its body: the OpenAPI document takes its schema from
the class (service/http/openapi.py). A field whose rule the route checks after parsing (a
non-blank name, a slug, an enum: 422, not 400) states that rule's JSON Schema beside itself
with `documented(...)`, so generated "valid" requests are valid and "invalid" ones invalid.
"""

from __future__ import annotations

import json
from functools import wraps
from typing import Annotated, Any, Awaitable, Callable, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticUndefined
from quart import g, request
from quart_schema.validation import QUART_SCHEMA_QUERYSTRING_ATTRIBUTE, QUART_SCHEMA_REQUEST_ATTRIBUTE, DataSource

from service.clock import TimestampOutOfRange, parse_iso
from service.errors import ApiError, BadRequest


STR = {"type": "string"}
TS = {"type": "string", "format": "date-time"}
UUID = {"type": "string", "format": "uuid"}


def nullable(schema: dict) -> dict:
    t = schema.get("type")
    if isinstance(t, str) and "$ref" not in schema and "enum" not in schema and "const" not in schema:
        return {**schema, "type": [t, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


# Python's whitespace (str.isspace), spelled out: the service strips with str.strip(), and a
# pattern's \s means something else in ECMA-262 (no \x1c-\x1f or \x85; \ufeff is in).
WS = r"\t\n\x0b\x0c\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def non_blank(max_chars: int | None = None) -> dict:
    """A string whose stripped text is non-empty (and at most `max_chars` characters)."""
    if max_chars is None:
        return {"type": "string", "pattern": f"[^{WS}]"}
    return {"type": "string", "pattern": f"^[{WS}]*[^{WS}](?:[\\s\\S]{{0,{max_chars - 2}}}[^{WS}])?[{WS}]*$"}


INT64 = {"type": "integer", "minimum": -(2 ** 63), "maximum": 2 ** 63 - 1,
         "description": "Query integers outside SQLite's 64-bit range are 400."}
LIMIT = {**INT64, "description": "Clamped to the route's range."}
OFFSET = {**INT64, "description": "Negative values count as 0."}
SLUG = {"type": "string", "pattern": r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$",
        "description": "1 to 64 lowercase letters, digits and hyphens; no hyphen at either end."}
SPEND_LIMIT = nullable({"type": "string", "pattern": r"^[0-9]{1,9}(\.[0-9]{1,2})?$",
                        "description": "Credits, at most two decimals, \"0\" or more (\"0\" stops all spending); "
                                       "null: no limit (else 400 request.validation_failed)."})


def documented(schema: dict, default: Any = PydanticUndefined, description: str | None = None) -> Any:
    """A body or query field whose document schema is `schema` (the rule the route checks
    after parsing), with the field's description and a non-null default; no default: required."""
    def state(field_schema: dict[str, Any]) -> None:
        keep = {k: v for k, v in field_schema.items()
                if k == "description" or (k == "default" and v is not None)}
        field_schema.clear()
        field_schema.update({**schema, **keep})

    return Field(default, description=description, json_schema_extra=state)


class Body(BaseModel):
    """Base of JSON bodies: strict types, unknown fields refused.

    One exception to strict: a JSON number with no fraction (`656.0`) is an integer where a
    field takes integers (JSON Schema counts it as one, and clients that write every number
    as a float send it); `656.5`, `true` and `"656"` stay refused. Only magnitudes below
    2**53 (exact in a float) are taken."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _integral_numbers(cls, value, info):
        if type(value) is float and value.is_integer() and abs(value) < 2**53:
            kinds = _kinds(cls.model_fields[info.field_name].annotation)
            if int in kinds and float not in kinds:
                return int(value)
        return value


def _kinds(annotation) -> set:
    """The plain types a field annotation admits (`int | None` -> {int, NoneType})."""
    args = get_args(annotation)
    if not args:
        return {annotation}
    return set().union(*(_kinds(a) for a in args))


class Query(BaseModel):
    """Base of query strings: unknown parameters refused; values arrive as strings."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*")
    @classmethod
    def _int_fits_sqlite(cls, value):
        if type(value) is int and not -(2**63) <= value < 2**63:
            raise ValueError("Input is out of range")
        return value


def _in_range(value: str | None) -> str | None:
    """A timestamp the service can write back: a well-formed one outside years 1 to 9999 in
    UTC is refused here (400); a malformed one is left to the route's own rule (422)."""
    if value is not None:
        try:
            parse_iso(value)
        except TimestampOutOfRange:
            raise ValueError("Timestamp is out of range: its UTC time must fall in the years 1 to 9999") from None
        except ValueError:
            pass
    return value


# A body field holding a timestamp with an offset.
Timestamp = Annotated[str, AfterValidator(_in_range)]


class ValidationFailed(ApiError):
    status = 400
    code = "request.validation_failed"


def errors_of(e: ValidationError, source: str) -> list[dict]:
    out = []
    for err in e.errors(include_url=False, include_input=False):
        key = ".".join(str(p) for p in err["loc"]) or None
        msg = "Object contains unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        if err["type"] == "missing":
            msg = "Field required"
        out.append({"message": msg, "key": key, "source": source})
    return out


class NotJson(ValueError):
    """A body the service does not take as JSON; `kind` is "utf8", "syntax" or "surrogate",
    so each door words the refusal in its own terms (the OpenAI door: its error envelope)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def decode_json(raw: bytes) -> Any:
    """A request body's JSON value, refused (NotJson) where it would break the service later:
    not UTF-8, not JSON (`NaN` and `Infinity` included), nested past the recursion limit, an
    integer of over 4,300 digits, or a string holding an unpaired surrogate."""
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise NotJson("The request body is not valid UTF-8.", "utf8") from None
    except (ValueError, RecursionError):  # JSONDecodeError, or an integer of > 4300 digits
        raise NotJson("The request body is not valid JSON.", "syntax") from None
    if (b"\\ud" in raw or b"\\uD" in raw) and _has_lone_surrogate(data):
        raise NotJson("The request body is not valid JSON: a string holds an unpaired surrogate.", "surrogate")
    return data


def parse_body(model: type[BaseModel], raw: bytes) -> BaseModel:
    try:
        data = decode_json(raw) if raw.strip() else {}
    except NotJson as e:
        raise BadRequest(str(e)) from None
    if not isinstance(data, dict):
        raise ValidationFailed("The request failed validation.",
                               {"errors": [{"message": "Body must be a JSON object", "key": None,
                                            "source": "body"}]})
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ValidationFailed("The request failed validation.", {"errors": errors_of(e, "body")}) from None


def _no_constant(name: str) -> Any:
    """`NaN`, `Infinity` and `-Infinity` are not JSON (Python's parser takes them)."""
    raise ValueError(f"{name} is not a JSON value")


def _has_lone_surrogate(data: Any) -> bool:
    """True when a string (key or value) cannot be encoded as UTF-8 (iterative: any depth)."""
    todo = [data]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
    return False


def _parsed(attribute: str, mark: Any, name: str, parse: Callable[[], Awaitable[Any]]) -> Callable:
    """A decorator that hands the view `parse()`'s value as keyword `name`, and records `mark`
    under quart-schema's `attribute` for the document."""
    def deco(func: Callable) -> Callable:
        @wraps(func)
        async def wrapper(*args, **kwargs):
            return await func(*args, **{name: await parse()}, **kwargs)

        setattr(wrapper, attribute, mark)
        return wrapper

    return deco


def body(model: type[BaseModel]) -> Callable:
    async def parse() -> BaseModel:
        raw = g.get("raw_body")  # read by the app's before-request hook (app.py)
        if raw is None:
            raw = await request.get_data(cache=True, as_text=False, parse_form_data=False)
        return parse_body(model, raw)

    return _parsed(QUART_SCHEMA_REQUEST_ATTRIBUTE, (model, DataSource.JSON), "data", parse)


def query(model: type[BaseModel]) -> Callable:
    async def parse() -> BaseModel:
        try:
            return model.model_validate({k: request.args.get(k) for k in request.args})
        except ValidationError as e:
            raise BadRequest("A query parameter is invalid.", {"errors": errors_of(e, "query")}) from None

    return _parsed(QUART_SCHEMA_QUERYSTRING_ATTRIBUTE, model, "q", parse)


def clamp(value: int | None, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    return max(low, min(high, value))
