"""The `espeak-ng` built-in model (`audio.speech` with eSpeak NG), through the public API:
a real WAV of plausible length for the text, charged on completion; cancel stops it."""

from __future__ import annotations

import io
import wave

from service.backends import espeak_speech
from test_generation_support import balance, local, submit, wait_hold, wait_status

SPEECH = "/v1/generation/capabilities/audio.speech"
TEXT = ("The quick brown fox jumps over the lazy dog. A self hosted node speaks this sentence "
        "with a formant synthesizer, one word after another.")


async def fetch(node, key: str, url: str) -> bytes:
    r = await node.call("GET", local(url), key)
    assert r.status_code == 302
    r = await node.call("GET", local(r.headers["Location"]), None)
    assert r.status_code == 200
    return await r.get_data()


async def test_speech_is_a_real_wav_of_plausible_length(node):
    key = (await node.create_org())["api_key"]
    rid = (await submit(node, key, {"prompt": TEXT}, path=SPEECH))["request_id"]
    st = await wait_status(node, key, rid)
    assert (st["status"], st["model"]) == ("completed", "espeak-ng"), st
    [out] = st["outputs"]
    assert out["content_type"] == "audio/wav"
    with wave.open(io.BytesIO(await fetch(node, key, out["url"]))) as w:
        rate, frames, channels = w.getframerate(), w.getnframes(), w.getnchannels()
        samples = w.readframes(frames)
    seconds = frames / rate
    words = len(TEXT.split())
    # at 160 words a minute, give or take pauses and the synthesizer's own pace
    assert 0.5 * words / 160 * 60 < seconds < 2.0 * words / 160 * 60, seconds
    assert (rate, channels) == (22050, 1)
    assert abs(out["duration_s"] - seconds) < 0.05
    assert max(samples[1::2]) > 16  # not silence: high bytes of 16-bit samples move
    assert (await wait_hold(node, key, rid, "captured"))["amount"] == "0.10"
    assert (await balance(node, key))["available"] == "199.90"


async def test_a_longer_text_gives_longer_speech_and_the_voice_is_the_tier(node):
    key = (await node.create_org())["api_key"]
    short = (await submit(node, key, {"prompt": "Hello.", "resolution": "en-gb"}, path=SPEECH))["request_id"]
    long = (await submit(node, key, {"prompt": TEXT, "resolution": "en-gb"}, path=SPEECH))["request_id"]
    a, b = (await wait_status(node, key, short)), (await wait_status(node, key, long))
    assert a["outputs"][0]["duration_s"] * 4 < b["outputs"][0]["duration_s"]


def test_text_that_looks_like_an_option_is_spoken_not_obeyed(tmp_path):
    from test_backends_models import request
    import threading

    req = request(tmp_path, capability="audio.speech", backend="espeak_speech", model="espeak-ng",
                  prompt="--help -w /tmp/elsewhere.wav", resolution="en-us")
    [out] = espeak_speech.run(req, threading.Event())
    assert out.path.parent == tmp_path / "work" and out.duration_s > 0.5
