"""What a command on the node's machine learns from the data directory: the operator token
(`DATA_DIR/operator-token`) and the URL the running node listens on (`DATA_DIR/node-url`,
written by `serve` once it listens). Standard library only: `genservice admin` imports this
and not the node, so it answers in a fraction of a second.
"""

from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.config import Settings

URL_FILE = "node-url"


def private_data_dir(settings: Settings) -> None:
    """DATA_DIR is the node user's alone (0700): it holds the database, the operator token and
    the node key. A directory made by hand (0755) is tightened; one this user does not own
    (a mount point) is left as it is: its files are 0600 anyway."""
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        if os.stat(settings.data_dir).st_mode & 0o077:
            os.chmod(settings.data_dir, 0o700)
    except PermissionError:
        pass


def ensure_operator_token(settings: Settings) -> str:
    """Use GENSERVICE_OPERATOR_TOKEN, else DATA_DIR/operator-token (created 0600 once)."""
    if settings.operator_token:
        return settings.operator_token
    path = settings.data_dir / "operator-token"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    os.chmod(path, 0o600)
    return path.read_text().strip()


def write_url(settings: Settings, url: str) -> None:
    """Record where this node listens, for `genservice admin` run with other settings."""
    path = settings.data_dir / URL_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(url + "\n")
    os.replace(tmp, path)


def node_url(settings: Settings, given: str | None = None) -> str:
    """The URL `genservice admin` calls: `--url`, else GENSERVICE_BASE_URL, else a host or port
    set for this command, else the URL the node on this data directory wrote, else host:port."""
    if given:
        return given.rstrip("/")
    chosen = settings.model_fields_set
    if settings.base_url or ({"host", "port"} & chosen and settings.port != 0):
        return settings.public_base_url
    try:
        written = (settings.data_dir / URL_FILE).read_text().strip()
    except OSError:
        written = ""
    return written.rstrip("/") or settings.public_base_url
