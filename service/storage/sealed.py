"""Start-up step for sealed secrets (service/sealing.py), on a connection of its own before
the store opens: seal any webhook secret still stored in clear (a database from before
sealing), vacuum when one was (the clear text stays in free pages otherwise), and finish or
drop a key rotation that stopped half-way."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from service.sealing import PREFIX, NodeKey
from service.storage.migrate import vacuum


def seal_at_rest(path: Path | str, key: NodeKey) -> int:
    """Returns how many secrets were sealed now."""
    conn = sqlite3.connect(str(path))
    try:
        rows = conn.execute("SELECT id, secret FROM webhooks").fetchall()
        plain = [(key.seal(secret), wid) for wid, secret in rows if not NodeKey.is_sealed(secret)]
        if plain:
            with conn:
                conn.executemany("UPDATE webhooks SET secret = ? WHERE id = ?", plain)
            vacuum(conn)
        used = {secret.removeprefix(PREFIX).split(":", 1)[0] for _, secret in rows if NodeKey.is_sealed(secret)}
        key.settle(used)
        return len(plain)
    finally:
        conn.close()
