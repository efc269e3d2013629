"""Run in the media check's workers (their `init`, tests/test_media_isolated.py): a file
holding CRASH anywhere in its bytes kills the worker checking it, as a decoder's crash on a
crafted file would (SIGSEGV); any other file is checked as always."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from service.media import isolated

CRASH = b"CRASH-THE-CHECK"


def arm() -> None:
    real = isolated.inspect_file

    def crashing(path, declared_type):
        if CRASH in Path(path).read_bytes():
            os.kill(os.getpid(), signal.SIGSEGV)
        return real(path, declared_type)

    isolated.inspect_file = crashing
