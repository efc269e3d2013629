"""Test-mode prompt directives and the spec's failure messages."""

from __future__ import annotations

import pytest

from service.backends.base import (
    FAILURE_MESSAGES,
    MSG_INCOMPLETE,
    MSG_INTERNAL,
    MSG_NO_OUTPUT,
    MSG_UNAVAILABLE,
    MSG_UPSTREAM,
)
from service.backends.directives import MAX_DELAY_S, Directives, parse_directives


def test_failure_messages_are_the_spec_list_in_order():
    assert FAILURE_MESSAGES == [
        "Generation failed upstream (HTTP {status}). Credits were released.",
        "Generation failed: the model backend is unavailable. Credits were released.",
        "Generation failed: the model backend could not complete the request. Credits were released.",
        "Generation failed: the model returned no output. Credits were released.",
        "Generation failed due to an internal error. Credits were released.",
    ]
    assert FAILURE_MESSAGES == [MSG_UPSTREAM, MSG_UNAVAILABLE, MSG_INCOMPLETE, MSG_NO_OUTPUT, MSG_INTERNAL]


def test_plain_prompt_has_no_directives():
    assert parse_directives("a red fox in snow") == ("a red fox in snow", Directives())


@pytest.mark.parametrize(
    "text, delay",
    [("[[delay:30]]", 30.0), ("[[delay:0.25]]", 0.25), ("[[delay:0]]", 0.0), ("[[delay:99999]]", MAX_DELAY_S)],
)
def test_delay(text, delay):
    prompt, d = parse_directives(f"a fox {text}")
    assert (prompt, d.delay_s, d.nsfw, d.failure) == ("a fox", delay, False, None)


def test_delays_add_up_to_the_cap():
    assert parse_directives("[[delay:2]] x [[delay:1.5]]")[1].delay_s == 3.5
    assert parse_directives("[[delay:3000]] [[delay:3000]]")[1].delay_s == MAX_DELAY_S
    assert MAX_DELAY_S == 3600


def test_nsfw():
    assert parse_directives("[[nsfw]] beach") == ("beach", Directives(nsfw=True))


@pytest.mark.parametrize(
    "text, message",
    [
        ("[[fail:upstream:502]]", "Generation failed upstream (HTTP 502). Credits were released."),
        ("[[fail:upstream:429]]", "Generation failed upstream (HTTP 429). Credits were released."),
        ("[[fail:unavailable]]", FAILURE_MESSAGES[1]),
        ("[[fail:incomplete]]", FAILURE_MESSAGES[2]),
        ("[[fail:no-output]]", FAILURE_MESSAGES[3]),
        ("[[fail:internal]]", FAILURE_MESSAGES[4]),
    ],
)
def test_fail(text, message):
    assert parse_directives(f"city {text} at night") == ("city at night", Directives(failure=message))


def test_first_fail_wins_and_all_are_stripped():
    prompt, d = parse_directives("[[fail:internal]] x [[fail:unavailable]] [[nsfw]] [[delay:5]]")
    assert prompt == "x"
    assert d == Directives(delay_s=5.0, nsfw=True, failure=MSG_INTERNAL)


@pytest.mark.parametrize(
    "text",
    [
        "[[fail:bogus]]",
        "[[fail:upstream:5xx]]",
        "[[fail:upstream:5020]]",
        "[[delay:-3]]",
        "[[delay:abc]]",
        "[[NSFW]]",
        "[delay:3]",
        "[[ nsfw ]]",
    ],
)
def test_anything_else_is_prompt_text(text):
    assert parse_directives(f"a {text} b") == (f"a {text} b", Directives())
