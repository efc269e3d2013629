"""The eight capabilities: fixed by the spec, so they live in code, not in the operator's TOML.

A capability says what kind of generation it is, what its prompt means, which
asset slots it takes and which aspect ratios make sense for it. Models (in
the TOML catalog) implement a capability and may tighten its slot counts.

Slot counts: a capability slot has a range `min..max`; each model takes an
exact `count` inside that range (the spec's "each slot takes exactly the number
of assets the model needs"). `video.generate`'s `start_frame` is 0..1 so a
text-to-video model can take none; `camera-move` takes exactly 1.

Aspect ratios are listed only where the request chooses the output's shape:
`image.generate`, `video.generate` and `image.edit` (an edit may reframe).
The others follow their input (`mask.segment`, `media.upscale`,
`video.lipsync`) or have no picture (`audio.speech`, `text.llm`), so their
list is empty and any `aspect_ratio` sent to them is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the shapes read the catalog's names: imported for mypy only
    from service.views import catalog_shapes as shapes

ASPECT_RATIOS: tuple[str, ...] = (
    "1:1", "4:3", "3:4", "3:2", "2:3", "16:9", "9:16", "21:9", "4:5", "5:4",
)

ASSET_KINDS: tuple[str, ...] = ("image", "video", "audio", "mask", "text")

# The longest prompt a submit takes (characters); the spec leaves it open (docs/design.md).
PROMPT_MAX_CHARS = 10_000


@dataclass(frozen=True)
class SlotSpec:
    """A capability's asset input slot: which kinds it takes and how many (a range)."""

    name: str
    kinds: tuple[str, ...]
    min: int
    max: int

    def view(self) -> shapes.CapabilitySlot:
        """`{name, kinds, min, max, required}` as listed in a capability's `inputs`; `required`
        when every model of the capability needs it (a model may still need an optional one:
        its offering's `inputs` say so)."""
        return {"name": self.name, "kinds": list(self.kinds), "min": self.min, "max": self.max,
                "required": self.min > 0}


@dataclass(frozen=True)
class Capability:
    id: str
    description: str
    output: str | None
    prompt_required: bool
    prompt_meaning: str
    inputs: tuple[SlotSpec, ...]
    aspect_ratios: tuple[str, ...]
    prompt_max_chars: int = PROMPT_MAX_CHARS

    def slot(self, name: str) -> SlotSpec | None:
        return next((s for s in self.inputs if s.name == name), None)


def _one(name: str, *kinds: str, min: int = 1) -> SlotSpec:
    return SlotSpec(name=name, kinds=kinds, min=min, max=1)


CAPABILITIES: tuple[Capability, ...] = (
    Capability(
        id="image.generate",
        description="Generate an image from a text description.",
        output="image",
        prompt_required=True,
        prompt_meaning="A description of the image to generate.",
        inputs=(),
        aspect_ratios=ASPECT_RATIOS,
    ),
    Capability(
        id="video.generate",
        description="Generate a short video clip from a description, optionally starting from a still.",
        output="video",
        prompt_required=True,
        prompt_meaning="A description of the clip and its motion.",
        inputs=(_one("start_frame", "image", min=0),),
        aspect_ratios=ASPECT_RATIOS,
    ),
    Capability(
        id="image.edit",
        description="Change an image following an instruction.",
        output="image",
        prompt_required=True,
        prompt_meaning="An instruction describing the edit.",
        inputs=(_one("image", "image"),),
        aspect_ratios=ASPECT_RATIOS,
    ),
    Capability(
        id="mask.segment",
        description="Produce a mask of the parts of an image the prompt names.",
        output="mask",
        prompt_required=True,
        prompt_meaning="What to segment.",
        inputs=(_one("image", "image"),),
        aspect_ratios=(),
    ),
    Capability(
        id="media.upscale",
        description="Enlarge an image or a video; the output has the input's kind.",
        output=None,
        prompt_required=False,
        prompt_meaning="An optional instruction or description; current models ignore it.",
        inputs=(_one("media", "image", "video"),),
        aspect_ratios=(),
    ),
    Capability(
        id="audio.speech",
        description="Speak a text aloud.",
        output="audio",
        prompt_required=True,
        prompt_meaning="The text to speak.",
        inputs=(),
        aspect_ratios=(),
    ),
    Capability(
        id="video.lipsync",
        description="Make the speaker in a video follow an audio track.",
        output="video",
        prompt_required=False,
        prompt_meaning="An optional instruction or description.",
        inputs=(_one("video", "video"), _one("audio", "audio")),
        aspect_ratios=(),
    ),
    Capability(
        id="text.llm",
        description="Write text following an instruction.",
        output="text",
        prompt_required=True,
        prompt_meaning="The instruction or question to answer.",
        inputs=(),
        aspect_ratios=(),
    ),
)

BY_ID: dict[str, Capability] = {c.id: c for c in CAPABILITIES}


def capability(cap_id: str) -> Capability | None:
    return BY_ID.get(cap_id)
