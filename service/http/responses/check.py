"""The check of real answers against their class (on in test mode: the in-process test
node and `serve` with GENSERVICE_TEST_MODE, which tests/test_schemathesis.py runs).

An answer passes when its JSON validates strictly against the operation's shape and
dumping the validated value gives back exactly the same JSON: a field the view sends that
the class lacks (undocumented), a missing one, or a value of another type all fail, so the
document cannot drift from the views. Production skips it (bench/response_check.py
measures what it would cost).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, get_args, get_origin

from pydantic import TypeAdapter, ValidationError

from . import Data


class ResponseMismatch(Exception):
    """An answer that is not exactly its documented shape (a bug in a view or a class)."""


@lru_cache(maxsize=None)
def _adapter(shape: Any) -> TypeAdapter:
    return TypeAdapter(shape)


def _diff(sent: Any, shown: Any, where: str = "$") -> str:
    """The first place where the sent JSON and the class's dump differ."""
    if isinstance(sent, dict) and isinstance(shown, dict):
        for key in sent.keys() | shown.keys():
            if key not in shown:
                return f"{where}.{key}: sent but not in the class"
            if key not in sent:
                return f"{where}.{key}: in the class but not sent"
            if sent[key] != shown[key]:
                return _diff(sent[key], shown[key], f"{where}.{key}")
    if isinstance(sent, list) and isinstance(shown, list) and len(sent) == len(shown):
        for i, (a, b) in enumerate(zip(sent, shown)):
            if a != b:
                return _diff(a, b, f"{where}[{i}]")
    return f"{where}: sent {sent!r}, the class gives {shown!r}"


def check(shape: Any, raw: bytes | str) -> None:
    """Raise `ResponseMismatch` unless `raw` is exactly an instance of `shape`."""
    sent = json.loads(raw)
    value, inner = sent, shape
    if get_origin(shape) is Data:
        if not isinstance(sent, dict) or set(sent) != {"data"}:
            got = sorted(sent) if isinstance(sent, dict) else type(sent).__name__
            raise ResponseMismatch(f"expected {{\"data\": ...}}, got keys {got}")
        value, inner = sent["data"], get_args(shape)[0]
    adapter = _adapter(inner)
    try:
        parsed = adapter.validate_python(value, strict=True)
    except ValidationError as e:
        raise ResponseMismatch(str(e)) from None
    shown = adapter.dump_python(parsed, mode="json", exclude_unset=True)
    if shown != value:
        raise ResponseMismatch(_diff(value, shown))
