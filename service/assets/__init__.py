"""Asset bytes: a content-addressed file store under DATA_DIR/assets/ and signed URLs."""

from .files import FileStore, hash_file
from .signing import LIFETIME_S, UrlSigner

__all__ = ["LIFETIME_S", "FileStore", "UrlSigner", "hash_file"]
