"""What a backend is given, what it hands back, and the spec's failure messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# The spec's failed-job messages, in its order; operations.md's `[[fail:...]]`
# directives select them by position.
MSG_UPSTREAM = "Generation failed upstream (HTTP {status}). Credits were released."
MSG_UNAVAILABLE = "Generation failed: the model backend is unavailable. Credits were released."
MSG_INCOMPLETE = (
    "Generation failed: the model backend could not complete the request. Credits were released."
)
MSG_NO_OUTPUT = "Generation failed: the model returned no output. Credits were released."
MSG_INTERNAL = "Generation failed due to an internal error. Credits were released."

FAILURE_MESSAGES = [MSG_UPSTREAM, MSG_UNAVAILABLE, MSG_INCOMPLETE, MSG_NO_OUTPUT, MSG_INTERNAL]


@dataclass(frozen=True)
class InputFile:
    """An input asset, already on local disk and inspected."""

    path: Path
    content_type: str
    kind: str  # image, video or audio
    width: int | None
    height: int | None
    duration_s: float | None
    frames: int | None = None  # video: its header's frame count


@dataclass(frozen=True)
class RenderRequest:
    job_id: str
    capability: str
    model: str
    backend: str
    prompt: str
    seed: int
    aspect_ratio: str | None
    resolution: str
    duration: float | None  # seconds; a job's are whole (an int, from its JobSettings)
    inputs: dict[str, list[InputFile]]
    work_dir: Path  # outputs are written here
    test_mode: bool
    resumed: bool = False  # the job was already rendering before a restart (an engine may still hold it)
    chat: ChatTurn | None = None  # a chat asked through the OpenAI-compatible front door


@dataclass
class ChatTurn:
    """A chat asked through `/openai/v1/chat/completions`: its messages and sampling replace
    the job's one-message prompt, and each piece of the reply goes to `on_text` as the
    engine reads it, so the front door can stream it on (kept in memory only: the caller's
    connection is the only one who reads it)."""

    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    temperature: float | None = None
    on_text: Callable[[str], None] | None = None
    finish_reason: str | None = None  # set by the engine when the reply is whole


@dataclass(frozen=True)
class Output:
    """A finished file under the request's work_dir."""

    path: Path
    content_type: str
    kind: str
    width: int | None
    height: int | None
    duration_s: float | None
    frames: int | None = None  # video: its frame count (bounds the work of a later use)
    # (sha256 hex, size) when the writer hashed the bytes it wrote (the render task then
    # reads the file again only for outputs without it: one worker-thread hop fewer a job)
    digest: tuple[str, int] | None = None


@dataclass(frozen=True)
class Completed:
    outputs: list[Output] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)  # an engine's report of what it used (token counts)


@dataclass(frozen=True)
class Failed:
    message: str  # one of FAILURE_MESSAGES, formatted


@dataclass(frozen=True)
class Flagged:
    """The output was judged not safe for work (job ends `nsfw`)."""


Outcome = Completed | Failed | Flagged


class BackendError(Exception):
    """A backend's own, expected failure; carries the client-facing message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
