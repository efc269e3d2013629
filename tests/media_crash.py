"""Run in the media check's workers (their `init`, tests/test_media_isolated.py): a file
holding CRASH anywhere in its bytes kills the worker checking it, as a decoder's crash on a
crafted file would (SIGSEGV); one holding HANG never ends, as a decoder looping on one
would (`arm_short` bounds a check at 1 s instead of CHECK_S); any other file is checked
as always."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from service.media import isolated

CRASH = b"CRASH-THE-CHECK"
HANG = b"HANG-THE-CHECK"


def fault(path) -> None:
    data = Path(path).read_bytes()
    if CRASH in data:
        os.kill(os.getpid(), signal.SIGSEGV)
    if HANG in data:
        while True:
            time.sleep(1)


def arm() -> None:
    """The check (`inspect_file`) and the size probe (`decode_pixels`) both meet the faults."""
    check, probe = isolated.inspect_file, isolated.decode_pixels

    def faulty_check(path, declared_type):
        fault(path)
        return check(path, declared_type)

    def faulty_probe(path):
        fault(path)
        return probe(path)

    isolated.inspect_file, isolated.decode_pixels = faulty_check, faulty_probe


def arm_short() -> None:
    arm()
    isolated.CHECK_S = 1
