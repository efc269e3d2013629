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


def arm() -> None:
    real = isolated.inspect_file

    def faulty(path, declared_type):
        data = Path(path).read_bytes()
        if CRASH in data:
            os.kill(os.getpid(), signal.SIGSEGV)
        if HANG in data:
            while True:
                time.sleep(1)
        return real(path, declared_type)

    isolated.inspect_file = faulty


def arm_short() -> None:
    arm()
    isolated.CHECK_S = 1
