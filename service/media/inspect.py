"""Check an uploaded file and read its kind, size and duration.

Which type a file is, is decided by its bytes (`sniff`), never by its name.
The declared type (the client's Content-Type) only chooses the error message:

- declared type missing, `application/octet-stream`, or outside ALLOWED:
  ignored; the sniff decides, and when it finds nothing the answer is
  "Unsupported content type '<declared or application/octet-stream>'.";
- declared type in ALLOWED and equal to the sniffed one: the file is decoded;
- declared type in ALLOWED but the bytes are something else (or nothing we
  accept): for a declared image type "File is not a readable image.", since
  the bytes do not decode as the declared image type; for a declared video or
  audio type "Unsupported content type '<declared>'.".

Declared types are compared case-insensitively, without parameters, and with
a few common aliases (image/jpg, audio/mp3, audio/x-wav, audio/wave) mapped
to their ALLOWED spelling. Every "Unsupported content type" answer carries
`details.allowed`.

Each file must then really decode: images fully (under MAX_PIXELS, checked
from the header before any pixel is decoded), video as an MP4 with a video
stream and a first frame (its frame size and frame count checked from the
header first, service.media.video), audio as WAV or MP3 with a first frame.
"""

from __future__ import annotations

import wave
from dataclasses import dataclass
from pathlib import Path

from ..errors import Unprocessable
from .gate import LARGE_DECODE
from .images import open_image, read_head, webp_size
from .sniff import ALLOWED, IMAGE_TYPES, sniff
from .video import cap_decoder, check_cost, frame_pixels, open_media, read_header, stream_duration

# Largest image accepted, in pixels; about 160 MB once decoded to RGBA.
MAX_PIXELS = 40_000_000

MSG_NOT_IMAGE = "File is not a readable image."
MSG_NOT_VIDEO = "File is not a readable video."
MSG_NOT_AUDIO = "File is not a readable audio file."

_ALIASES = {
    "image/jpg": "image/jpeg",
    "audio/mp3": "audio/mpeg",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
}


@dataclass(frozen=True)
class MediaInfo:
    kind: str  # image, video or audio
    content_type: str
    width: int | None  # None for audio
    height: int | None
    duration_s: float | None  # None for images
    frames: int | None = None  # video only: the header's frame count


def inspect_file(path: str | Path, declared_type: str | None) -> MediaInfo:
    """What the file at `path` is; raises Unprocessable when it is not accepted."""
    sniffed = sniff(read_head(path))
    declared = _normalise(declared_type)
    if declared in ALLOWED and declared != sniffed:
        if declared in IMAGE_TYPES:
            raise Unprocessable(MSG_NOT_IMAGE)
        raise _unsupported(declared_type)
    if sniffed is None:
        raise _unsupported(declared_type)
    if sniffed in IMAGE_TYPES:
        return _inspect_image(path, sniffed)
    if sniffed == "video/mp4":
        return _inspect_video(path)
    return _inspect_audio(path, sniffed)


def image_pixels(path: str | Path) -> int:
    """Pixels an image file declares in its header (0 when it is not an image we take, or
    its header does not read): what decoding it will cost, known without decoding."""
    head = read_head(path)
    kind = sniff(head)
    if kind not in IMAGE_TYPES:
        return 0
    if kind == "image/webp":
        size = webp_size(head)
        return size[0] * size[1] if size else 0
    try:
        with open_image(path, kind) as im:  # lazy: reads the header only
            return im.size[0] * im.size[1]
    except Exception:  # noqa: BLE001 - the full inspection gives the client its answer
        return 0


def decode_pixels(path: str | Path) -> int:
    """Pixels one decode of the file holds at once, from its header (an image's, or one
    frame of a video's); 0 when unknown. Decides whether the decode takes a gate slot."""
    if sniff(read_head(path)) == "video/mp4":
        return frame_pixels(path)
    return image_pixels(path)


def _normalise(declared_type: str | None) -> str | None:
    if not declared_type:
        return None
    bare = declared_type.split(";", 1)[0].strip().lower()
    return _ALIASES.get(bare, bare)


def _unsupported(declared_type: str | None) -> Unprocessable:
    shown = (declared_type or "").strip() or "application/octet-stream"
    return Unprocessable(f"Unsupported content type '{shown}'.", {"allowed": list(ALLOWED)})


def _inspect_image(path: str | Path, content_type: str) -> MediaInfo:
    if content_type == "image/webp":
        # Pillow allocates a WebP canvas while opening: check the size first.
        size = webp_size(read_head(path))
        if size is None or size[0] * size[1] > MAX_PIXELS:
            raise Unprocessable(MSG_NOT_IMAGE)
    try:
        with open_image(path, content_type) as im:
            width, height = im.size
            if width < 1 or height < 1 or width * height > MAX_PIXELS:
                raise Unprocessable(MSG_NOT_IMAGE)
            im.load()
    except Unprocessable:
        raise
    except Exception as e:  # any decoder complaint means the same to the client
        raise Unprocessable(MSG_NOT_IMAGE) from e
    return MediaInfo("image", content_type, width, height, None)


def _inspect_video(path: str | Path) -> MediaInfo:
    try:
        with open_media(path, "mp4") as container:
            if not container.streams.video:
                raise Unprocessable(MSG_NOT_VIDEO)
            stream = container.streams.video[0]
            header = read_header(container, stream)
            check_cost(header)  # before any frame is decoded
            cap_decoder(stream)
            next(container.decode(stream))  # at least one frame decodes
    except Unprocessable:
        raise
    except Exception as e:
        raise Unprocessable(MSG_NOT_VIDEO) from e
    if not header.duration_s:
        raise Unprocessable(MSG_NOT_VIDEO)
    return MediaInfo("video", "video/mp4", header.width, header.height, header.duration_s, header.frames)


def _inspect_audio(path: str | Path, content_type: str) -> MediaInfo:
    duration = None
    if content_type == "audio/wav":
        duration = _wav_duration(path)
    if duration is None:  # MP3, or a WAV the wave module cannot read (float, extensible)
        duration = _av_audio_duration(path, "mp3" if content_type == "audio/mpeg" else "wav")
    return MediaInfo("audio", content_type, None, None, duration)


def _wav_duration(path: str | Path) -> float | None:
    try:
        with wave.open(str(path), "rb") as w:
            rate, frames = w.getframerate(), w.getnframes()
            if rate <= 0 or frames <= 0 or not w.readframes(1):
                raise Unprocessable(MSG_NOT_AUDIO)
            return frames / rate
    except Unprocessable:
        raise
    except Exception:
        return None


def _av_audio_duration(path: str | Path, fmt: str) -> float:
    try:
        # an MP3's cover art is probed: no picture over LARGE_DECODE is decoded here
        with open_media(path, fmt, LARGE_DECODE) as container:
            if not container.streams.audio:
                raise Unprocessable(MSG_NOT_AUDIO)
            stream = container.streams.audio[0]
            duration = stream_duration(container, stream)
            next(container.decode(stream))
    except Unprocessable:
        raise
    except Exception as e:
        raise Unprocessable(MSG_NOT_AUDIO) from e
    if not duration:
        raise Unprocessable(MSG_NOT_AUDIO)
    return duration
