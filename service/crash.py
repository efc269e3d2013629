"""Named crash points (test mode only): `GENSERVICE_CRASHPOINT=name[:n]` makes the n-th pass
of `crashpoint(name)` end the process at once with `os._exit(137)`, as SIGKILL would: no
cleanup, no flush. Outside test mode, or for other names, a crash point does nothing.

Every name used in the code is listed in POINTS; a test checks the two agree.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

POINTS = {
    "hold_committed": "hold committed, job not yet handed to a worker",
    "output_produced": "model output produced, asset not yet stored",
    "final_committed": "final job status and capture committed, job webhook not yet sent",
    "delivery_sending": "outbox row marked sending, POST not yet sent",
    "job_webhook_sending": "job webhook row marked sending, POST not yet sent",
    "mail_sending": "outbox mail marked sending, SMTP conversation not yet started",
    "payment_verified": "provider confirmation verified, lot not yet committed",
    "step_finished": "product step finished, next step's hold not yet placed",
    "upload_complete": "upload file complete, asset row not yet committed",
}

_target: str | None = None
_remaining = 0


def configure(spec: str | None, test_mode: bool) -> None:
    """Arm one crash point from `name[:n]` (n defaults to 1)."""
    global _target, _remaining
    _target, _remaining = None, 0
    if not spec or not test_mode:
        return
    name, _, n = spec.partition(":")
    if name not in POINTS:
        raise ValueError(f"unknown crash point {name!r}; known: {', '.join(sorted(POINTS))}")
    _target, _remaining = name, int(n or 1)


def crashpoint(name: str) -> None:
    global _remaining
    if _target is None or name != _target:
        return
    _remaining -= 1
    if _remaining == 0:
        log.critical("crash point %s reached: exiting now", name)
        os._exit(137)
