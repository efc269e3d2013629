"""Asset bytes as objects in an S3-compatible store (`GENSERVICE_ASSET_STORE=s3://BUCKET/PREFIX`).

Same contract as `FileStore` (service/assets/files.py), whose local parts it keeps: uploads
are received into `assets/tmp/` and renders write into `work/`, both scratch. `place` sends
the bytes to `PREFIX/ab/cd/<sha256>` and drops the local file; only then does the caller
commit the asset row, so no row ever names a missing object (a failed put raises and the
caller writes nothing). Requests are signed by botocore (SigV4); large objects go up in
parts (s3transfer), each part with a SHA-256 checksum the store verifies; a fetched object
is hashed and compared with its key before anyone reads it.

Every method here blocks (network): call them through `trio.to_thread.run_sync`. boto3's
client is thread-safe and shared.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from service.assets.files import CHUNK, FileStore, ObjectMissing, StoreUnavailable

log = logging.getLogger(__name__)

MULTIPART_THRESHOLD = 16 * 1024 * 1024  # objects above this go up in parts of this size
_SHA = re.compile(r"^[0-9a-f]{64}$")


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

    def key(self, sha256: str) -> str:
        name = f"{sha256[:2]}/{sha256[2:4]}/{sha256}"
        return f"{self.prefix}/{name}" if self.prefix else name

    def exists(self, sha256: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key(sha256))
            return True
        except _errors() as e:
            if _missing(e):
                return False
            raise StoreUnavailable(f"object store: {type(e).__name__}") from None

    def place(self, src: str | Path, sha256: str) -> Path:
        """Put `src` (whose digest is `sha256`) as the object of its digest, then drop it."""
        from boto3.s3.transfer import TransferConfig

        src = Path(src)
        try:
            if not self.exists(sha256):
                config = TransferConfig(multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=MULTIPART_THRESHOLD,
                                        use_threads=False)
                self.client.upload_file(str(src), self.bucket, self.key(sha256), Config=config,
                                        ExtraArgs={"ChecksumAlgorithm": "SHA256"})
        except _errors() as e:
            raise StoreUnavailable(f"object store: could not store an asset ({type(e).__name__})") from None
        src.unlink(missing_ok=True)
        return src

    def local(self, sha256: str, into: Path | None = None) -> Path:
        """A local copy of the object (for a render or an op) in the scratch directory `into`
        (deleted with it), streamed to disk in chunks and checked against its digest."""
        directory = into if into is not None else self.work / "fetched"
        dst = directory / sha256
        if dst.is_file():
            return dst
        directory.mkdir(parents=True, exist_ok=True)
        part = dst.with_suffix(f".{os.getpid()}.{id(dst)}.part")
        h = hashlib.sha256()
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.key(sha256))["Body"]
            with open(part, "wb") as f:
                for chunk in body.iter_chunks(CHUNK):
                    h.update(chunk)
                    f.write(chunk)
        except _errors() as e:
            part.unlink(missing_ok=True)
            if _missing(e):
                raise ObjectMissing(sha256) from None
            raise StoreUnavailable(f"object store: {type(e).__name__}") from None
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        if h.hexdigest() != sha256:
            part.unlink(missing_ok=True)
            raise StoreUnavailable(f"object store: object {sha256} does not match its digest")
        os.replace(part, dst)
        return dst

    def input_path(self, sha256: str, job_id: str) -> Path:
        return self.work_dir(job_id) / "inputs" / sha256  # removed with the job's scratch

    def fetch_inputs(self, paths: list[Path]) -> None:
        for path in paths:
            self.local(path.name, path.parent)

    def presign(self, sha256: str, expires_in: int, content_type: str) -> str:
        """A presigned GET of the object, good for `expires_in` seconds, served inline with
        the asset's type (signing is local: no request to the store)."""
        return str(self.client.generate_presigned_url(
            "get_object", ExpiresIn=max(1, expires_in),
            Params={"Bucket": self.bucket, "Key": self.key(sha256), "ResponseContentType": content_type,
                    "ResponseContentDisposition": "inline", "ResponseCacheControl": f"private, max-age={expires_in}"}))

    def remove_unreferenced(self, referenced: set[str]) -> int:
        """Delete objects no asset row names (a stop between the put and the row's commit)."""
        removed = 0
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=f"{self.prefix}/" if self.prefix else "")
            for page in pages:
                for obj in page.get("Contents", []):
                    sha = obj["Key"].rsplit("/", 1)[-1]
                    # only this store's own layout: a bucket may hold other nodes' prefixes or copies
                    if _SHA.match(sha) and obj["Key"] == self.key(sha) and sha not in referenced:
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
