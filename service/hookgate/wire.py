"""Frames between the hook gate's child and the node, on one local stream socket.

A request (child -> node): seq, kind, then a JSON head `[method, path, headers]` and the
raw body. An answer (node -> child): seq, status, then a JSON list of headers and the body.
Lengths are explicit, so a body is never copied into JSON and a frame is found without
parsing its contents.
"""

from __future__ import annotations

import json
import struct

REQUEST = struct.Struct(">IBII")  # seq, kind, head length, body length
ANSWER = struct.Struct(">IHII")  # seq, status, headers length, body length
COMPLETE, TOO_LARGE, TIMED_OUT = 0, 1, 2  # a request's kind: its body read whole, or why not

Headers = list[list[str]]  # [name, value] pairs, latin-1 as HTTP has them


def request(seq: int, kind: int, method: str, path: str, headers: Headers, body: bytes) -> bytes:
    head = json.dumps([method, path, headers], separators=(",", ":")).encode()
    return REQUEST.pack(seq, kind, len(head), len(body)) + head + body


def answer(seq: int, status: int, headers: Headers, body: bytes) -> bytes:
    head = json.dumps(headers, separators=(",", ":")).encode()
    return ANSWER.pack(seq, status, len(head), len(body)) + head + body


def take_request(buf: bytearray) -> tuple[int, int, str, str, Headers, bytes] | None:
    """The first whole request in `buf`, removed from it; None while it is incomplete."""
    if len(buf) < REQUEST.size:
        return None
    seq, kind, head_len, body_len = REQUEST.unpack_from(buf)
    end = REQUEST.size + head_len + body_len
    if len(buf) < end:
        return None
    method, path, headers = json.loads(bytes(buf[REQUEST.size:REQUEST.size + head_len]))
    body = bytes(buf[REQUEST.size + head_len:end])
    del buf[:end]
    return seq, kind, method, path, headers, body


def take_answer(buf: bytearray) -> tuple[int, int, Headers, bytes] | None:
    """The first whole answer in `buf`, removed from it; None while it is incomplete."""
    if len(buf) < ANSWER.size:
        return None
    seq, status, head_len, body_len = ANSWER.unpack_from(buf)
    end = ANSWER.size + head_len + body_len
    if len(buf) < end:
        return None
    headers = json.loads(bytes(buf[ANSWER.size:ANSWER.size + head_len]))
    body = bytes(buf[ANSWER.size + head_len:end])
    del buf[:end]
    return seq, status, headers, body
