"""The uploads actor (registry `uploads`, one per organization): commits an uploaded asset.

The HTTP route has already received, hashed and inspected the file into
`assets/tmp/<asset_id>.part`. `CommitUpload` stores the bytes (a file placed by its digest,
or an object put in the S3-compatible store), then writes the asset row. From the moment
the message is sent the actor owns the temp file and always deletes it. A store that is
down answers 503 and writes no row; a stop between the store and the commit leaves bytes
no row names, removed by the sweep at the next start. So no row ever names missing bytes.
"""

from __future__ import annotations

from typing import Any

from dataclasses import dataclass
from pathlib import Path

import trio

from service.actors.runtime import Actor, on
from service.assets.files import FileStore, StoreUnavailable
from service.assets.scopes import scope_of
from service.errors import Unavailable
from service.storage import generation as sql
from service.storage.db import Store


STORE_DOWN = "The asset store is unavailable; try the upload again later."


@dataclass(frozen=True)
class CommitUpload:
    row: dict[str, Any]
    temp: Path


class UploadsActor(Actor):
    def __init__(self, store: Store, files: FileStore) -> None:
        self.store = store
        self.files = files

    @on(CommitUpload)
    async def _commit(self, msg: CommitUpload) -> dict[str, Any]:
        # Bytes first, then the row: an object store may be down, and no row may name
        # missing bytes. A stop between the two leaves stored bytes no row names; the sweep
        # at the next start (remove_unreferenced) deletes them.
        try:
            await trio.to_thread.run_sync(self.files.place, msg.temp, msg.row["sha256"], scope_of(msg.row))
            await self.store.write(lambda c: sql.insert_asset(c, msg.row))
        except StoreUnavailable:
            raise Unavailable(STORE_DOWN) from None
        finally:
            msg.temp.unlink(missing_ok=True)
        self.done = True  # stateless: stop once the mailbox is empty
        return msg.row
