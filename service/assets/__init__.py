"""Asset bytes: a content-addressed store (files under DATA_DIR/assets/ or objects in an
S3-compatible store, there one per organization: service/assets/scopes.py) and signed URLs."""

from .files import FileStore, ObjectMissing, StoreUnavailable, hash_file
from .scopes import object_name, scope_of
from .signing import LIFETIME_S, UrlSigner

__all__ = ["LIFETIME_S", "FileStore", "ObjectMissing", "StoreUnavailable", "UrlSigner", "hash_file", "object_name",
           "open_store", "scope_of"]


def open_store(settings) -> FileStore:
    """The asset store the settings name: `file` (the default) or `s3://BUCKET/PREFIX`."""
    if settings.asset_store == "file":
        return FileStore(settings.data_dir)
    from .s3 import S3Store
    return S3Store(settings.data_dir, settings.asset_store, settings.s3_endpoint_url, settings.s3_region)
