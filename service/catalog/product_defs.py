"""The products the service defines, each at its current version.

To change a product: copy its definition, raise `version`, and add the new one
to `BUILTIN` after the old one, keeping the old (runs started on it finish on
it). A preset copies its base when built, so publish it again as well.
"""

from __future__ import annotations

from .capabilities import ASPECT_RATIOS
from .product_types import FromInput, FromStep, Input, Product, Step, Template, TextOf, make_preset

PROMPT = Input(
    "text", "Prompt", "What the still shows; the clip moves the camera over it.", required=True,
)
SEED = Input("number", "Seed", "The same seed and prompt give the same still.")

TEXT_TO_CLIP = Product(
    slug="text-to-clip",
    name="Text to clip",
    category="video",
    description="A still from your prompt, a 5 second clip moving over it, and a cover frame.",
    version=1,
    inputs={
        "prompt": PROMPT,
        "aspect_ratio": Input("choice", "Aspect ratio", None, required=True, default="16:9",
                              options=ASPECT_RATIOS),
        "resolution": Input("choice", "Resolution", "Resolution of the clip.", required=True,
                            default="480p", options=("480p", "720p")),
        "seed": SEED,
    },
    steps=(
        Step("still", capability="image.generate", model="proc-image", params={
            "prompt": FromInput("prompt"), "aspect_ratio": FromInput("aspect_ratio"),
            "resolution": "1k", "seed": FromInput("seed"),
        }),
        Step("clip", capability="video.generate", model="camera-move", params={
            "prompt": FromInput("prompt"), "aspect_ratio": FromInput("aspect_ratio"),
            "resolution": FromInput("resolution"), "duration": 5, "seed": FromInput("seed"),
            "inputs": {"start_frame": FromStep("still")},
        }),
        Step("thumb", op="resize_image", params={"image": FromStep("still"), "max_side": 512}),
        Step("cover", op="extract_frame", params={"video": FromStep("clip"), "at": "middle"}),
    ),
    outputs={"still": "still", "clip": "clip", "cover": "cover", "thumbnail": "thumb"},
)

TEXT_TO_CLIP_VERTICAL = make_preset(
    TEXT_TO_CLIP,
    slug="text-to-clip-vertical",
    name="Text to vertical clip",
    description="Text to clip in 9:16, for phones and stories.",
    version=1,
    fixed={"aspect_ratio": "9:16"},
)

TALKING_PORTRAIT = Product(
    slug="talking-portrait",
    name="Talking portrait",
    category="video",
    description="A portrait from your description that speaks your script.",
    version=1,
    inputs={
        "prompt": Input("text", "Portrait", "Who is speaking.", required=True),
        "script": Input("text", "Script", "What they say.", required=True),
    },
    steps=(
        Step("portrait", capability="image.generate", model="proc-image", params={
            "prompt": FromInput("prompt"), "aspect_ratio": "3:4", "resolution": "1k",
        }),
        Step("motion", capability="video.generate", model="camera-move", params={
            "prompt": "A slow push-in on the face.", "aspect_ratio": "3:4",
            "resolution": "480p", "duration": 5, "inputs": {"start_frame": FromStep("portrait")},
        }),
        Step("voice", capability="audio.speech", params={"prompt": FromInput("script")}),
        Step("lipsync", capability="video.lipsync", params={
            "inputs": {"video": FromStep("motion"), "audio": FromStep("voice")},
        }),
    ),
    outputs={"portrait": "portrait", "audio": "voice", "video": "lipsync"},
)

VOICEOVER = Product(
    slug="voiceover",
    name="Voiceover",
    category="audio",
    description="A short script written about your topic, read aloud.",
    version=1,
    inputs={
        "topic": Input("text", "Topic", "What the voiceover is about.", required=True),
        "tone": Input("choice", "Tone", None, required=True, default="calm",
                      options=("calm", "upbeat", "serious")),
    },
    steps=(
        Step("script", capability="text.llm", params={
            "prompt": Template("Write a {tone} voiceover script of about 60 words about: {topic}"),
        }),
        Step("voice", capability="audio.speech", params={"prompt": TextOf("script")}),
    ),
    outputs={"script": "script", "audio": "voice"},
)

BUILTIN: tuple[Product, ...] = (TEXT_TO_CLIP, TEXT_TO_CLIP_VERTICAL, TALKING_PORTRAIT, VOICEOVER)
