"""render(): test-mode directives on trio's mock clock, outcomes, and errors inside backends."""

from __future__ import annotations

import dataclasses
import logging
import threading

import av
import pytest
import trio
from PIL import Image

from service.backends import (
    BACKENDS,
    FAILURE_MESSAGES,
    InputFile,
    MSG_INCOMPLETE,
    MSG_INTERNAL,
    MSG_NO_OUTPUT,
    MSG_UNAVAILABLE,
    Backend,
    BackendError,
    Completed,
    Failed,
    Flagged,
    Output,
    RenderRequest,
    render,
    runnable,
)
from service.backends.procedural_image import paint


def request(tmp_path, prompt="a lighthouse", *, test_mode=True, **kw) -> RenderRequest:
    base = RenderRequest(
        job_id="job1",
        capability="image.generate",
        model="proc-image",
        backend="procedural_image",
        prompt=prompt,
        seed=7,
        aspect_ratio="1:1",
        resolution="1k",
        duration=None,
        inputs={},
        work_dir=tmp_path,
        test_mode=test_mode,
    )
    return dataclasses.replace(base, **kw)


@pytest.fixture
def fake_backend(monkeypatch):
    """Install a backend named `fake` whose work is the given function."""

    def install(fn):
        monkeypatch.setitem(BACKENDS, "fake", Backend("fake", "image.generate", fn))
        return "fake"

    return install


async def test_delay_runs_on_the_trio_clock(tmp_path, autojump_clock):
    """An hour's delay passes on the autojump clock: the render waits on trio's clock (a wait
    on the real one would hold the test an hour, past the suite's faulthandler timeout)."""
    start = trio.current_time()
    outcome = await render(request(tmp_path, "a lighthouse [[delay:3600]]"))
    assert isinstance(outcome, Completed)
    assert trio.current_time() - start == pytest.approx(3600)


async def test_failure_comes_after_the_delay(tmp_path, autojump_clock):
    start = trio.current_time()
    outcome = await render(request(tmp_path, "[[delay:12.5]] [[fail:upstream:503]] x"))
    assert outcome == Failed("Generation failed upstream (HTTP 503). Credits were released.")
    assert trio.current_time() - start == pytest.approx(12.5)
    assert list(tmp_path.iterdir()) == []  # nothing rendered


@pytest.mark.parametrize(
    "directive, message",
    [
        ("[[fail:upstream:500]]", FAILURE_MESSAGES[0].format(status=500)),
        ("[[fail:unavailable]]", FAILURE_MESSAGES[1]),
        ("[[fail:incomplete]]", FAILURE_MESSAGES[2]),
        ("[[fail:no-output]]", FAILURE_MESSAGES[3]),
        ("[[fail:internal]]", FAILURE_MESSAGES[4]),
    ],
)
async def test_fail_directives(tmp_path, directive, message):
    assert await render(request(tmp_path, f"a fox {directive}")) == Failed(message)


async def test_nsfw_directive(tmp_path):
    assert await render(request(tmp_path, "beach [[nsfw]]")) == Flagged()


async def test_failure_beats_nsfw(tmp_path):
    assert await render(request(tmp_path, "[[nsfw]] [[fail:internal]]")) == Failed(MSG_INTERNAL)


async def test_directives_are_stripped_before_the_model_sees_the_prompt(tmp_path):
    plain = await render(request(tmp_path / "a", "a red fox"))
    directed = await render(request(tmp_path / "b", "a red fox [[delay:0]]"))
    assert plain.outputs[0].path.read_bytes() == directed.outputs[0].path.read_bytes()


async def test_outside_test_mode_directives_are_prompt_text(tmp_path, autojump_clock):
    start = trio.current_time()
    literal = "a red fox [[fail:internal]] [[delay:30]] [[nsfw]]"
    outcome = await render(request(tmp_path, literal, test_mode=False))
    assert isinstance(outcome, Completed)
    assert trio.current_time() == start  # the delay was not obeyed
    with Image.open(outcome.outputs[0].path) as im:
        got = im.convert("RGB")
    assert got.tobytes() == paint(literal, 7, 1024, 1024).tobytes()  # drawn from the literal text
    assert got.tobytes() != paint("a red fox", 7, 1024, 1024).tobytes()


async def test_completed_outputs(tmp_path):
    outcome = await render(request(tmp_path, aspect_ratio="16:9"))
    assert outcome == Completed([Output(tmp_path / "job1.png", "image/png", "image", 1024, 576, None)])


async def test_unexpected_exception_becomes_internal_error_and_is_logged(tmp_path, fake_backend, caplog):
    def broken(req, stop):
        raise RuntimeError("division by zero somewhere")

    req = request(tmp_path, backend=fake_backend(broken))
    with caplog.at_level(logging.ERROR, logger="service.backends"):
        assert await render(req) == Failed(MSG_INTERNAL)
    [record] = [r for r in caplog.records if r.exc_info]
    assert "job1" in record.getMessage() and isinstance(record.exc_info[1], RuntimeError)


async def test_backend_error_carries_its_message(tmp_path, fake_backend):
    def incomplete(req, stop):
        raise BackendError(MSG_INCOMPLETE)

    assert await render(request(tmp_path, backend=fake_backend(incomplete))) == Failed(MSG_INCOMPLETE)


async def test_upscale_of_audio_fails_incomplete(tmp_path):
    audio = InputFile(tmp_path / "a.wav", "audio/wav", "audio", None, None, 1.0)
    req = request(tmp_path, backend="lanczos_upscale", resolution="2x", inputs={"media": [audio]})
    assert await render(req) == Failed(MSG_INCOMPLETE)


@pytest.mark.parametrize("outputs", [[], [Output(None, "image/png", "image", 1, 1, None)]])
async def test_no_output(tmp_path, fake_backend, outputs):
    missing = [dataclasses.replace(o, path=tmp_path / "never-written.png") for o in outputs]
    req = request(tmp_path, backend=fake_backend(lambda req, stop: missing))
    assert await render(req) == Failed(MSG_NO_OUTPUT)


async def test_unknown_backend_is_unavailable(tmp_path):
    assert await render(request(tmp_path, backend="stable_diffusion")) == Failed(MSG_UNAVAILABLE)


def test_runnable(monkeypatch):
    assert all(runnable(name) for name in ("procedural_image", "camera_move_video", "lanczos_upscale"))
    assert not runnable("stable_diffusion")
    monkeypatch.setattr(av, "codecs_available", set())
    assert not runnable("camera_move_video")
    assert runnable("procedural_image")


async def test_video_without_its_encoder_fails_unavailable(tmp_path, monkeypatch):
    monkeypatch.setattr(av, "codecs_available", set())
    req = request(tmp_path, backend="camera_move_video", resolution="480p")
    assert await render(req) == Failed(MSG_UNAVAILABLE)


async def test_cancel_returns_at_once_and_tells_the_thread_to_stop(tmp_path, fake_backend):
    started, finished = threading.Event(), threading.Event()
    seen = {}

    def slow(req, stop):
        started.set()
        seen["stopped"] = stop.wait(10)
        finished.set()
        return []

    req = request(tmp_path, backend=fake_backend(slow))
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(render, req)
            assert await trio.to_thread.run_sync(started.wait, 10)
            scope.cancel()
    assert scope.cancelled_caught
    assert await trio.to_thread.run_sync(finished.wait, 10)
    assert seen["stopped"] is True
