"""`espeak_speech`: `audio.speech` with eSpeak NG, a formant speech synthesizer.

A real text-to-speech engine that runs on a CPU with no model download: the
`espeak-ng` program (Debian's `espeak-ng` package; scripts/setup installs it). It
sounds robotic - it is not a neural voice - and is fast (seconds of speech in tens
of milliseconds). The text goes to the program on standard input (never as an
argument, so no text is read as an option); `-w` writes a 22.05 kHz mono WAV.

Tiers (the model's `resolutions`) are voices: `en-us`, `en-gb`, ... any voice
`espeak-ng --voices` lists. The seed is not used: eSpeak NG is deterministic.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import wave
from pathlib import Path

from .base import MSG_INCOMPLETE, BackendError, Output, RenderRequest

PROGRAM = "espeak-ng"
WORDS_PER_MINUTE = 160
TIMEOUT_S = 120.0


def available() -> bool:
    return shutil.which(PROGRAM) is not None


def run(req: RenderRequest, stop: threading.Event) -> list[Output]:
    text = req.prompt.strip()
    if not text:
        raise BackendError(MSG_INCOMPLETE)
    Path(req.work_dir).mkdir(parents=True, exist_ok=True)
    path = Path(req.work_dir) / f"{req.job_id}.wav"
    cmd = [PROGRAM, "-v", req.resolution, "-s", str(WORDS_PER_MINUTE), "-w", str(path), "--stdin"]
    with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(text.encode("utf-8"))
        proc.stdin.close()
        waited = 0.0
        while proc.poll() is None:  # the job may be cancelled meanwhile: stop the program then
            if stop.wait(0.02):
                proc.kill()
                proc.wait()
                return []
            waited += 0.02
            if waited > TIMEOUT_S:
                proc.kill()
                proc.wait()
                raise BackendError(MSG_INCOMPLETE)
        err = proc.stderr.read().decode("utf-8", "replace").strip()
    if proc.returncode != 0 or not path.is_file():
        raise RuntimeError(f"espeak-ng exited {proc.returncode}: {err[:300]}")
    with wave.open(str(path)) as w:
        duration = w.getnframes() / w.getframerate()
    return [Output(path, "audio/wav", "audio", None, None, round(duration, 3))]
