"""`POST /v1/generation/uploads`: one file in, one asset out (201 `{data: asset}`).

Multipart rules (multipart/form-data with an ASCII boundary, else 400 request.bad_request):
- `file` (required, exactly one): a file part (with a `filename`); its part Content-Type is
  the declared type. Accepted: PNG, JPEG, WebP, MP4, MP3, WAV, decided by the bytes
  (service.media.inspect). Over 50 MiB: 422 "File exceeds 50 MiB.". A body over 51 MiB:
  413 request.bad_request, and the connection is closed.
- `project_id` (optional text field, at most 200 characters): project id or slug; else the
  X-Service-Project header, else the default project. Unknown 404; archived 409.
- At most 64 parts (else 400 request.bad_request, as for a body that is not valid
  multipart). The parser holds at most `MAX_BUFFERED` bytes it could not yet place (a
  preamble, a part's headers, an epilogue): more is 400 request.bad_request too, so a
  50 MiB header line costs no more memory than a 2 MiB one.
- Any other part, a second `file`, a `file` sent as a plain field or a `project_id` sent
  as a file: 400 request.validation_failed with `details.errors[] = {message, key,
  source: "body"}` ("Object contains unknown field", "Field required", ...).
- Order of checks: multipart shape (400) -> project (404/409) -> size (422) -> type (422).
- A response sent before the whole body was read (401, 403, 408, 413, 429) carries
  `Connection: close`.
- At most `UPLOADS_PER_ORG` (32) uploads of one organization in progress at once, this
  route's and the dashboard's together (each holds a connection and up to 51 MiB of disk
  for up to 120 s); one more is 429 `request.rate_limited` with `Retry-After: 5`, before
  its body is read. A place is given back however the upload ends (`upload_slot`).

The body is read as it arrives (never buffered whole): the file part streams into
`DATA_DIR/assets/tmp/<asset_id>.part` while it is hashed; the rest of the body is always
drained, even after an error, so the connection stays usable. The asset is committed by the
uploads actor, which then moves the file into its content-addressed place; a failed upload
leaves no file and no row. Route time limit: 120 s (408).
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import AsyncGenerator, Iterator
from contextlib import AbstractContextManager, aclosing, contextmanager
from pathlib import Path
from typing import BinaryIO

import trio
from pydantic import BaseModel, ConfigDict, Field
from quart import Blueprint, current_app, g, request
from quart_schema import document_request
from quart_schema.validation import DataSource
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.sansio.multipart import Data, Epilogue, Field as FieldEvent, File, MultipartDecoder, NeedData

from service.views.jobs import asset_record
from service.crash import crashpoint
from service.errors import BadRequest, RateLimited, Unprocessable
from service.http.app import UPLOAD_BODY_LIMIT
from service.http.auth import UPLOAD_LIMIT, principal, requires, resolve_project, node
from service.http import responses as R
from service.http.errors import envelope
from service.http.schemas import ValidationFailed, documented

bp = Blueprint("uploads", __name__)

MiB = 1024 * 1024
MAX_FILE = 50 * MiB
FILE_TOO_BIG = "File exceeds 50 MiB."
SLICE = 1 * MiB          # the parser is fed at most this much at a time
THREAD_WRITE = 256 * 1024  # file data at least this big is written and hashed in a thread
MAX_FIELD = 200
MAX_PARTS = 64            # more parts than this: the body is not a plausible upload (400)
MAX_BUFFERED = 2 * SLICE  # unplaced bytes the parser may hold (preamble, part headers, epilogue)
MAX_ERRORS = 20
UPLOADS_PER_ORG = 32  # a browser sends a few at a time, a batch script tens; past it one queues
UPLOAD_RETRY_S = 5


class UploadSlots:
    """Uploads in progress per organization, in memory: a restart ends them all anyway."""

    def __init__(self, per_org: int) -> None:
        self.per_org = per_org
        self.open: Counter[str] = Counter()

    @contextmanager
    def hold(self, org_id: str) -> Iterator[None]:
        if self.open[org_id] >= self.per_org:
            raise RateLimited(f"Too many uploads in progress for this organization (at most {self.per_org} "
                              "at once). Retry when one has finished.", UPLOAD_RETRY_S,
                              {"uploads_in_progress_limit": self.per_org})
        self.open[org_id] += 1
        try:
            yield
        finally:  # finished, refused, the client gone, the route's time limit: all end here
            self.open[org_id] -= 1
            if self.open[org_id] <= 0:
                del self.open[org_id]


def upload_slot(org_id: str) -> AbstractContextManager[None]:
    """One of the organization's upload places for the `with` block (429 when none is free);
    the node's one `UploadSlots`, shared by the API's and the dashboard's upload."""
    slots = current_app.extensions.setdefault("upload_slots", UploadSlots(UPLOADS_PER_ORG))
    return slots.hold(org_id)


class UploadForm(BaseModel):
    """multipart/form-data (documentation only; the route parses the stream itself)."""

    model_config = ConfigDict(extra="forbid")

    file: bytes = Field(description="The file (PNG, JPEG, WebP, MP4, MP3 or WAV; at most 50 MiB).",
                        json_schema_extra={"format": "binary"})
    project_id: str | None = documented({"type": "string", "maxLength": 200}, None, "Project id or slug.")


class TooLarge(Exception):
    pass


class Received:
    """What the multipart stream held."""

    def __init__(self, temp: Path, accepted: tuple[str, ...] = ("project_id",), max_field: int = MAX_FIELD) -> None:
        self.temp = temp
        self.max_field = max_field
        self.accepted = accepted  # the text fields taken (the API: project_id; the dashboard: its form's)
        self.fields: dict[str, str] = {}
        self.errors: list[dict] = []
        self.file_seen = False
        self.declared_type: str | None = None
        self.size = 0
        self.sha = hashlib.sha256()
        self.too_big = False
        self.malformed = False
        self.complete = False
        self._part: str | None = None  # "file", a field name, or None (skip)
        self._buf = bytearray()
        self._fh: BinaryIO | None = None

    def error(self, key: str, message: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append({"message": message, "key": key, "source": "body"})

    async def feed(self, decoder: MultipartDecoder) -> None:
        while True:
            event = decoder.next_event()
            if isinstance(event, NeedData):
                return
            if isinstance(event, File):
                self._end_part()
                if event.name == "file" and not self.file_seen:
                    self.file_seen = True
                    self.declared_type = event.headers.get("content-type")
                    self._fh = open(self.temp, "wb")  # noqa: SIM115 - closed in _end_part / close
                    self._part = "file"
                else:
                    self._reject(event.name, as_file=True)
            elif isinstance(event, FieldEvent):
                self._end_part()
                if event.name in self.accepted and event.name not in self.fields:
                    self._part, self._buf = event.name, bytearray()
                else:
                    self._reject(event.name, as_file=False)
            elif isinstance(event, Data):
                await self._data(event.data)
                if not event.more_data:
                    self._end_part()
            elif isinstance(event, Epilogue):
                self._end_part()
                self.complete = True
                return

    def _reject(self, name: str | None, *, as_file: bool) -> None:
        self._part = None
        if name == "file":
            self.error("file", "Only one file may be sent." if self.file_seen and as_file
                       else "file must be a file part.")
        elif name == "project_id":
            self.error("project_id", "project_id must be a text field." if as_file
                       else "project_id may be given once.")
        else:
            self.error(name or "", "Object contains unknown field")

    async def _data(self, data: bytes) -> None:
        if self._part == "file":
            if self.too_big:
                return
            if self.size + len(data) > MAX_FILE:
                self.too_big = True
                return
            self.size += len(data)
            if len(data) >= THREAD_WRITE:
                await trio.to_thread.run_sync(self._write, data)
            else:
                self._write(data)
        elif self._part is not None:
            self._buf.extend(data)
            if len(self._buf) > self.max_field * 4:
                self.error(self._part, f"{self._part} must be at most {self.max_field} characters.")
                self._part = None

    def _write(self, data: bytes) -> None:
        assert self._fh is not None  # a file part is open
        self._fh.write(data)
        self.sha.update(data)

    def _end_part(self) -> None:
        if self._part == "file":
            self.close()
        elif self._part is not None:
            try:
                text = self._buf.decode("utf-8")
            except UnicodeDecodeError:
                self.error(self._part, f"{self._part} must be UTF-8 text.")
            else:
                if len(text) > self.max_field:
                    self.error(self._part, f"{self._part} must be at most {self.max_field} characters.")
                else:
                    self.fields[self._part] = text
        self._part = None

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


async def receive(boundary: str, temp: Path, accepted: tuple[str, ...] = ("project_id",),
                  max_field: int = MAX_FIELD) -> Received:
    """Read the whole body, parsing what can be parsed; raises TooLarge past 51 MiB."""
    got = Received(temp, accepted, max_field)
    decoder = MultipartDecoder(boundary.encode("latin-1"), MAX_BUFFERED, max_parts=MAX_PARTS)
    try:
        async with aclosing(_body()) as body:
            async for chunk in body:
                if got.malformed or got.complete:
                    continue  # keep draining
                try:
                    for start in range(0, len(chunk), SLICE):
                        decoder.receive_data(chunk[start:start + SLICE])
                        await got.feed(decoder)
                except (ValueError, RequestEntityTooLarge):  # malformed, or too many parts
                    got.malformed = True
        if not got.malformed and not got.complete:
            try:
                decoder.receive_data(None)
                await got.feed(decoder)
            except (ValueError, RequestEntityTooLarge):
                got.malformed = True
    finally:
        got.close()
    g.upload_body_read = True
    if not got.complete:
        got.malformed = True
    return got


async def _body() -> AsyncGenerator[bytes, None]:
    """The request body's chunks; TooLarge past 51 MiB (counted here, or Quart's own limit)."""
    total = 0
    try:
        async for chunk in request.body:
            total += len(chunk)
            if total > UPLOAD_BODY_LIMIT:
                raise TooLarge()
            yield chunk
    except RequestEntityTooLarge:
        raise TooLarge() from None


async def _drain() -> None:
    async with aclosing(_body()) as body:
        async for _chunk in body:
            pass
    g.upload_body_read = True


@bp.after_request
async def close_if_unread(response):
    """A response sent before the whole body was read (401, 403, 408, 413, a crash) closes
    the connection: the rest of the body is never read, so the connection cannot be reused
    (Hypercorn's trio worker can otherwise hang the next request on it)."""
    if not g.get("upload_body_read"):
        response.headers["Connection"] = "close"
    return response


def _too_large():
    resp, status = envelope(413, "request.bad_request", "The request body is too large.",
                            {"max_bytes": UPLOAD_BODY_LIMIT})
    resp.headers["Connection"] = "close"
    return resp, status


@bp.post("/v1/generation/uploads")
@requires("generation:write", limit=UPLOAD_LIMIT)
@document_request(UploadForm, source=DataSource.FORM_MULTIPART)
async def upload() -> tuple[R.Data[R.Asset], int]:
    """Upload one file as an asset: multipart/form-data with the file in `file` and an
    optional `project_id` field. 201 `{data: asset}`."""
    p = principal()
    gen = node().generation
    boundary = request.mimetype_params.get("boundary")
    if boundary is not None and not boundary.isascii():  # e.g. RFC 2231 `boundary*=UTF-8''%E2%98%83`
        boundary = None
    try:
        with upload_slot(p.org_id):
            if request.mimetype != "multipart/form-data" or not boundary:
                await _drain()
                raise BadRequest("The upload must be multipart/form-data with the file in the field 'file'.")
            asset_id = str(uuid.uuid4())
            temp = gen.files.upload_temp(asset_id)
            handed_over = False
            try:
                got = await receive(boundary, temp)
                if got.malformed:
                    raise BadRequest("The request body is not valid multipart/form-data.")
                if not got.file_seen and not any(e["key"] == "file" for e in got.errors):
                    got.error("file", "Field required")
                if got.errors:
                    raise ValidationFailed("The request failed validation.", {"errors": got.errors})
                project = resolve_project(got.fields.get("project_id") or None, write=True)
                if got.too_big:
                    raise Unprocessable(FILE_TOO_BIG, {"max_bytes": MAX_FILE})
                info = await gen.inspect_upload(temp, got.declared_type, p.org_id)
                row = asset_row(asset_id, p.org_id, project["id"], info, got, gen.clock.iso_now())
                crashpoint("upload_complete")  # the file is complete in tmp/, no asset row yet
                handed_over = True  # from here on the uploads actor owns the temp file
                row = await gen.commit_upload(p.org_id, row, temp)
            finally:
                if not handed_over:
                    temp.unlink(missing_ok=True)
    except TooLarge:
        return _too_large()
    return {"data": asset_record(row, gen.base_url)}, 201


def asset_row(asset_id: str, org_id: str, project_id: str, info, got, now_iso: str) -> dict:
    """The asset row of an uploaded file (the API's upload and the dashboard's)."""
    return {
        "id": asset_id, "organization_id": org_id, "project_id": project_id, "job_id": None,
        "position": 0, "source": "upload", "kind": info.kind, "content_type": info.content_type,
        "width": info.width, "height": info.height, "duration_s": info.duration_s, "frames": info.frames,
        "size_bytes": got.size, "sha256": got.sha.hexdigest(), "created_at": now_iso,
    }
