"""Asset bytes as objects in an S3-compatible store (`GENSERVICE_ASSET_STORE=s3://BUCKET/PREFIX`).

Same contract as `FileStore` (service/assets/files.py), whose local parts it keeps: uploads
are received into `assets/tmp/` and renders write into `work/`, both scratch. `place` sends
the bytes to `PREFIX/orgs/<org id>/ab/cd/<sha256>` (one object per organization and content:
service/assets/scopes.py; rows stored before name `PREFIX/ab/cd/<sha256>`, scope None) and
drops the local file; only then does the caller commit the asset row, so no row ever names a
missing object (a failed put raises and the caller writes nothing). Requests are signed by
botocore (SigV4); large objects go up in parts (s3transfer), each part with a SHA-256
checksum the store verifies; a fetched object is hashed and compared with its key before
anyone reads it.

Every method here blocks (network): call them through `trio.to_thread.run_sync`. boto3's
client is thread-safe and shared.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

from service.assets.files import CHUNK, FileStore, ObjectMissing, StoreUnavailable
from service.assets.scopes import object_name

log = logging.getLogger(__name__)

MULTIPART_THRESHOLD = 16 * 1024 * 1024  # objects above this go up in parts of this size
_SHA = re.compile(r"^[0-9a-f]{64}$")
_SCOPE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ORG_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
SHARED = "shared"  # an input's directory in a job's scratch when it is the node-wide object


def parse_store_url(url: str) -> tuple[str, str]:
    """`s3://BUCKET/PREFIX` -> (bucket, prefix without slashes)."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError(f"asset store must be 'file' or s3://BUCKET/PREFIX, not {url!r}")
    return parts.netloc, parts.path.strip("/")


def make_client(endpoint_url: str | None, region: str) -> Any:
    """A boto3 S3 client: path-style addressing (MinIO, Ceph, Garage, moto), short timeouts so
    a store that is down answers 503 soon instead of holding a request."""
    import boto3
    from botocore.config import Config

    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2, "mode": "standard"},
                    connect_timeout=5, read_timeout=30, signature_version="s3v4",
                    request_checksum_calculation="when_required", response_checksum_validation="when_required")
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, region_name=region, config=config)


def _errors() -> tuple[type[BaseException], ...]:
    """What the store or the way to it can raise. boto3's transfers wrap the store's refusal
    (a ClientError) in their own Boto3Error (S3UploadFailedError): a refused put is the
    store's answer too, not a crash."""
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError
    return (BotoCoreError, ClientError, Boto3Error)


def _missing(e: BaseException) -> bool:
    code = str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound")


class S3Store(FileStore):
    def __init__(self, data_dir: str | Path, url: str, endpoint_url: str | None = None,
                 region: str = "us-east-1", client: Any = None) -> None:
        super().__init__(data_dir)
        self.bucket, self.prefix = parse_store_url(url)
        self.client = client or make_client(endpoint_url, region)

    def key(self, sha256: str, scope: str | None = None) -> str:
        name = f"{sha256[:2]}/{sha256[2:4]}/{sha256}"
        if scope is not None:
            if not _SCOPE.match(scope) or scope == SHARED:
                raise ValueError(f"not a store scope: {scope!r}")
            name = f"orgs/{scope}/{name}"
        return f"{self.prefix}/{name}" if self.prefix else name

    def exists(self, sha256: str, scope: str | None = None) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key(sha256, scope))
            return True
        except _errors() as e:
            if _missing(e):
                return False
            raise StoreUnavailable(f"object store: {type(e).__name__}") from None

    def place(self, src: str | Path, sha256: str, scope: str | None = None) -> Path:
        """Put `src` (whose digest is `sha256`) as the object of its digest in `scope` (kept
        once per scope: the same bytes again are not sent), then drop it."""
        from boto3.s3.transfer import TransferConfig

        src = Path(src)
        try:
            if not self.exists(sha256, scope):
                config = TransferConfig(multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=MULTIPART_THRESHOLD,
                                        use_threads=False)
                self.client.upload_file(str(src), self.bucket, self.key(sha256, scope), Config=config,
                                        ExtraArgs={"ChecksumAlgorithm": "SHA256"})
        except _errors() as e:
            raise StoreUnavailable(f"object store: could not store an asset ({type(e).__name__})") from None
        src.unlink(missing_ok=True)
        return src

    def _chunks(self, sha256: str, scope: str | None) -> Iterator[bytes]:
        """The object's bytes in chunks; its digest is checked after the last one (a
        mismatch raises StoreUnavailable), so a reader uses them only once this ends."""
        h = hashlib.sha256()
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.key(sha256, scope))["Body"]
            for chunk in body.iter_chunks(CHUNK):
                h.update(chunk)
                yield chunk
        except _errors() as e:
            if _missing(e):
                raise ObjectMissing(sha256) from None
            raise StoreUnavailable(f"object store: {type(e).__name__}") from None
        if h.hexdigest() != sha256:
            raise StoreUnavailable(f"object store: object {sha256} does not match its digest")

    def read_bytes(self, sha256: str, limit: int, scope: str | None = None) -> bytes:
        """The object's first `limit` bytes, streamed into memory (never to disk). The whole
        object is read, as a fetch always was, so its digest is checked before any is used."""
        kept = bytearray()
        for chunk in self._chunks(sha256, scope):
            if len(kept) < limit:
                kept += chunk[:limit - len(kept)]
        return bytes(kept)

    def local(self, sha256: str, into: Path | None = None, scope: str | None = None) -> Path:
        """A local copy of the object (for a render or an op) in the scratch directory `into`
        (deleted with it), streamed to disk in chunks and checked against its digest."""
        directory = into if into is not None else self.work / "fetched"
        dst = directory / sha256
        if dst.is_file():
            return dst
        directory.mkdir(parents=True, exist_ok=True)
        part = dst.with_suffix(f".{os.getpid()}.{id(dst)}.part")
        try:
            with open(part, "wb") as f:
                for chunk in self._chunks(sha256, scope):
                    f.write(chunk)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        os.replace(part, dst)
        return dst

    def input_path(self, sha256: str, job_id: str, scope: str | None = None) -> Path:
        """Under the job's scratch (removed with it), in a directory named by the scope, which
        is how `fetch_inputs` knows which object to fetch."""
        return self.work_dir(job_id) / "inputs" / (scope or SHARED) / sha256

    def fetch_inputs(self, paths: list[Path]) -> None:
        for path in paths:
            scope = path.parent.name
            self.local(path.name, path.parent, None if scope == SHARED else scope)

    def presign(self, sha256: str, expires_in: int, content_type: str, scope: str | None = None) -> str:
        """A presigned GET of the object, good for `expires_in` seconds, served inline with
        the asset's type (signing is local: no request to the store)."""
        return str(self.client.generate_presigned_url(
            "get_object", ExpiresIn=max(1, expires_in),
            Params={"Bucket": self.bucket, "Key": self.key(sha256, scope), "ResponseContentType": content_type,
                    "ResponseContentDisposition": "inline", "ResponseCacheControl": f"private, max-age={expires_in}"}))

    def _name(self, key: str) -> str | None:
        """The referenced-set name (scopes.object_name) of a key of this store's own layout;
        None for anything else: a bucket may hold other nodes' prefixes or copies. A scope
        must look like an organization id, so another node's prefix `PREFIX/orgs/<name>`
        nested in this one is not taken for this store's objects."""
        sha = key.rsplit("/", 1)[-1]
        if not _SHA.match(sha):
            return None
        if key == self.key(sha):
            return object_name(sha, None)
        scope = key.removeprefix(f"{self.prefix}/" if self.prefix else "").split("/")[1:2]
        if scope and _ORG_ID.match(scope[0]) and key == self.key(sha, scope[0]):
            return object_name(sha, scope[0])
        return None

    def remove_unreferenced(self, referenced: set[str]) -> int:
        """Delete objects no asset row names (a stop between the put and the row's commit).
        `referenced` holds digests (node-wide objects) and `org/digest` (scoped ones)."""
        removed = 0
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=f"{self.prefix}/" if self.prefix else "")
            for page in pages:
                for obj in page.get("Contents", []):
                    name = self._name(obj["Key"])
                    if name is not None and name not in referenced:
                        self.client.delete_object(Bucket=self.bucket, Key=obj["Key"])
                        removed += 1
        except _errors() as e:
            raise StoreUnavailable(f"object store: {type(e).__name__}") from None
        return removed

    def recover_uploads(self, asset_sha: Callable[[str], str | None]) -> tuple[int, int]:
        """Bytes are stored before a row commits, so a temp file left by a stop is never
        needed: drop them all."""
        dropped = 0
        for part in self.tmp.iterdir():
            part.unlink(missing_ok=True)
            dropped += 1
        return 0, dropped

    def check(self) -> None:
        """At start: can the bucket be reached? Raises StoreUnavailable."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except _errors() as e:
            raise StoreUnavailable(f"object store: bucket {self.bucket!r} unreachable ({type(e).__name__})") from None
