"""Frames between the hook gate's child and the node, on one local stream socket.

A request (child -> node): seq, kind, then a JSON head `[method, path, headers]` and the
raw body. An answer (node -> child): seq, status, then a JSON list of headers and the body.
Lengths are explicit, so a body is never copied into JSON and a frame is found without
parsing its contents.
"""

from __future__ import annotations

import json
import struct
from typing import Any

REQUEST = struct.Struct(">IBII")  # seq, kind, head length, body length
ANSWER = struct.Struct(">IHII")  # seq, status, headers length, body length
COMPLETE, TOO_LARGE, TIMED_OUT = 0, 1, 2  # a request's kind: its body read whole, or why not

Headers = list[list[str]]  # [name, value] pairs, latin-1 as HTTP has them


def request(seq: int, kind: int, method: str, path: str, headers: Headers, body: bytes) -> bytes:
    return _pack(REQUEST, (seq, kind), [method, path, headers], body)


def answer(seq: int, status: int, headers: Headers, body: bytes) -> bytes:
    return _pack(ANSWER, (seq, status), headers, body)


def take_request(buf: bytearray) -> tuple[int, int, str, str, Headers, bytes] | None:
    """The first whole request in `buf`, removed from it; None while it is incomplete."""
    got = _take(REQUEST, buf)
    if got is None:
        return None
    (seq, kind), (method, path, headers), body = got
    return seq, kind, method, path, headers, body


def take_answer(buf: bytearray) -> tuple[int, int, Headers, bytes] | None:
    """The first whole answer in `buf`, removed from it; None while it is incomplete."""
    got = _take(ANSWER, buf)
    if got is None:
        return None
    (seq, status), headers, body = got
    return seq, status, headers, body


def _pack(frame: struct.Struct, fields: tuple[int, int], head: Any, body: bytes) -> bytes:
    encoded = json.dumps(head, separators=(",", ":")).encode()
    return frame.pack(*fields, len(encoded), len(body)) + encoded + body


def _take(frame: struct.Struct, buf: bytearray) -> tuple[tuple[int, int], Any, bytes] | None:
    """A frame's two leading fields, its decoded head and its body, removed from `buf`."""
    if len(buf) < frame.size:
        return None
    first, second, head_len, body_len = frame.unpack_from(buf)
    end = frame.size + head_len + body_len
    if len(buf) < end:
        return None
    head = json.loads(bytes(buf[frame.size:frame.size + head_len]))
    body = bytes(buf[frame.size + head_len:end])
    del buf[:end]
    return (first, second), head, body
