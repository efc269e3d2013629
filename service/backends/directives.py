"""Test-mode prompt directives (operations.md, "Test mode").

`[[delay:S]]` makes the render take S seconds (a decimal, capped at an hour;
several add up), `[[nsfw]]` ends the job `nsfw`, and `[[fail:...]]` ends it
`failed` with one of the spec's messages:

    [[fail:upstream:CODE]]  1  (HTTP CODE, three digits)
    [[fail:unavailable]]    2
    [[fail:incomplete]]     3
    [[fail:no-output]]      4
    [[fail:internal]]       5

The first fail directive wins, and a failure beats `[[nsfw]]`. Anything else
in double brackets is ordinary prompt text. Outside test mode nothing here
runs: the prompt goes to the model exactly as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .base import MSG_INCOMPLETE, MSG_INTERNAL, MSG_NO_OUTPUT, MSG_UNAVAILABLE, MSG_UPSTREAM

MAX_DELAY_S = 3600.0

_FAILURES = {
    "unavailable": MSG_UNAVAILABLE,
    "incomplete": MSG_INCOMPLETE,
    "no-output": MSG_NO_OUTPUT,
    "internal": MSG_INTERNAL,
}

_DIRECTIVE = re.compile(
    r"\[\[(?:"
    r"delay:(?P<delay>\d+(?:\.\d+)?)"
    r"|(?P<nsfw>nsfw)"
    r"|fail:upstream:(?P<code>\d{3})"
    r"|fail:(?P<fail>unavailable|incomplete|no-output|internal)"
    r")\]\]"
)


@dataclass(frozen=True)
class Directives:
    delay_s: float = 0.0
    nsfw: bool = False
    failure: str | None = None  # the formatted failure message


def parse_directives(prompt: str) -> tuple[str, Directives]:
    """The prompt without its directives, and what they ask for."""
    delay, nsfw, failure = 0.0, False, None
    for m in _DIRECTIVE.finditer(prompt):
        if m["delay"] is not None:
            delay += float(m["delay"])
        elif m["nsfw"]:
            nsfw = True
        elif failure is None and m["code"] is not None:
            failure = MSG_UPSTREAM.format(status=m["code"])
        elif failure is None and m["fail"] is not None:
            failure = _FAILURES[m["fail"]]
    cleaned = re.sub(r" {2,}", " ", _DIRECTIVE.sub("", prompt)).strip()
    return cleaned, Directives(min(delay, MAX_DELAY_S), nsfw, failure)
