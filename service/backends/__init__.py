"""Model backends: the built-in local models and the test-mode directives.

`render(req)` is the one entry point; `runnable(name)` says whether this node
can run a backend named in the catalog.
"""

from .base import (
    FAILURE_MESSAGES,
    MSG_INCOMPLETE,
    MSG_INTERNAL,
    MSG_NO_OUTPUT,
    MSG_UNAVAILABLE,
    MSG_UPSTREAM,
    BackendError,
    Completed,
    Failed,
    Flagged,
    InputFile,
    Outcome,
    Output,
    RenderRequest,
)
from .run import BACKENDS, Backend, render, render_limiter, runnable

__all__ = [
    "BACKENDS",
    "FAILURE_MESSAGES",
    "MSG_INCOMPLETE",
    "MSG_INTERNAL",
    "MSG_NO_OUTPUT",
    "MSG_UNAVAILABLE",
    "MSG_UPSTREAM",
    "render_limiter",
    "Backend",
    "BackendError",
    "Completed",
    "Failed",
    "Flagged",
    "InputFile",
    "Outcome",
    "Output",
    "RenderRequest",
    "render",
    "runnable",
]
