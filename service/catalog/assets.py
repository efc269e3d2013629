"""Asset references in requests: what counts as one of ours, and the project check.

Storage lives elsewhere, so the caller hands in `resolve_inputs(ids) ->
{id: AssetInfo | None}`; this module only decides what the answers mean.
Shared by generation submits (slots) and product runs (asset inputs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping
from urllib.parse import urlsplit

from service.errors import Unprocessable

UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_CONTENT_RE = re.compile(r"^v1/generation/assets/([^/]+)/content$")
_FILES_RE = re.compile(r"^files/([^/]+)$")

NOT_OURS = "Inputs must be asset ids or URLs returned by /v1/generation."
NOT_FOUND = "Input asset not found in this project."


@dataclass(frozen=True)
class AssetInfo:
    id: str
    kind: str  # image, video, audio, mask, text
    project_id: str
    width: int | None = None  # images and video
    height: int | None = None
    duration_s: float | None = None  # video
    frames: int | None = None  # video: the header's frame count (None: stored before it was kept)


ResolveInputs = Callable[[list[str]], Mapping[str, "AssetInfo | None"]]


def parse_asset_ref(value: str, base_url: str | None) -> str | None:
    """The asset id a request value names, or None when it is not one of ours.

    Accepted: a bare UUID; `{base_url}/v1/generation/assets/<uuid>/content`;
    a signed URL `{base_url}/files/<uuid>` with any query (the signature is not
    checked here: the asset must still be in the request's project). With
    `base_url` None only bare UUIDs are accepted. Ids come back lower-case.
    """
    if not isinstance(value, str):
        return None
    if UUID_RE.match(value):
        return value.lower()
    if not base_url:
        return None
    got, base = urlsplit(value), urlsplit(base_url.rstrip("/"))
    if (got.scheme.lower(), got.netloc.lower()) != (base.scheme.lower(), base.netloc.lower()):
        return None
    prefix = base.path + "/"
    if not got.path.startswith(prefix) or got.fragment:
        return None
    rest = got.path[len(prefix):]
    m = _CONTENT_RE.match(rest)
    if m and not got.query:
        return _uuid(m.group(1))
    m = _FILES_RE.match(rest)
    if m:
        return _uuid(m.group(1))
    return None


def _uuid(s: str) -> str | None:
    return s.lower() if UUID_RE.match(s) else None


def find_assets(
    ids: Iterable[str],
    resolve_inputs: ResolveInputs,
    project_id: str,
    details: dict | None = None,
) -> dict[str, AssetInfo]:
    """Look the ids up; 422 listing every id that is missing or in another project."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    found = resolve_inputs(wanted)
    missing = [
        i for i in wanted
        if (info := found.get(i)) is None or info.project_id != project_id
    ]
    if missing:
        raise Unprocessable(NOT_FOUND, {**(details or {}), "asset_ids": missing})
    return {i: found[i] for i in wanted}  # type: ignore[misc]


def kinds_text(kinds: Iterable[str]) -> str:
    """`image` or `image or video`, for messages."""
    return " or ".join(kinds)
