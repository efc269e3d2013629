"""Tables of Studio's gallery ("My generations").

`studio_hidden`: jobs a person hid from the gallery (the job, its outputs and its ledger stay;
the API still lists it). `thumbnails`: one small picture per distinct output image, made once
on first view and kept in the file store by its own digest (`thumb_sha256`), keyed by the
digest of the image it shows, so the gallery never sends a full-size output to draw a tile.
"""

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("studio")


@migrations()
def m001_gallery(db: Database) -> None:
    db.executescript(
        """
        CREATE TABLE studio_hidden (
            job_id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL,
            hidden_at TEXT NOT NULL
        );
        CREATE TABLE thumbnails (
            sha256 TEXT PRIMARY KEY,
            thumb_sha256 TEXT NOT NULL,
            content_type TEXT NOT NULL,
            width INTEGER NOT NULL,
            height INTEGER NOT NULL,
            size_bytes INTEGER NOT NULL,
            created_at TEXT NOT NULL
        );
        """
    )
