"""The uploads actor (registry `uploads`, one per organization): commits an uploaded asset.

The HTTP route has already received, hashed and inspected the file into
`assets/tmp/<asset_id>.part`. `CommitUpload` writes the asset row, then moves the file into
its content-addressed place. From the moment the message is sent the actor owns the temp
file: if the row cannot be committed it deletes it; if the node stops between the commit
and the move, `FileStore.recover_uploads` finishes the move at the next start (the temp
file is named by the asset id). So a failed upload leaves nothing behind and a committed
row always gets its bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trio

from service.actors.runtime import Actor
from service.storage import generation as sql


@dataclass(frozen=True)
class CommitUpload:
    row: dict
    temp: Path


class UploadsActor(Actor):
    def __init__(self, store, files) -> None:
        self.store = store
        self.files = files

    async def handle(self, msg: CommitUpload) -> dict:
        try:
            await self.store.write(lambda c: sql.insert_asset(c, msg.row))
        except BaseException:
            msg.temp.unlink(missing_ok=True)
            raise
        await trio.to_thread.run_sync(self.files.place, msg.temp, msg.row["sha256"])
        self.done = True  # stateless: stop once the mailbox is empty
        return msg.row
