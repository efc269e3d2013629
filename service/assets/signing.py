"""Signed asset URLs: `{base_url}/files/<asset_id>?exp=<epoch>&sig=<hex>`.

`sig` is HMAC-SHA256 over `"<asset_id>.<exp>"` keyed with a secret generated once into
`DATA_DIR/asset-url-secret` (mode 0600). A URL is valid without an API key while service
time is before `exp`; `exp` is the issue time (whole seconds, rounded down) plus 900, so a
URL is good at 0 and 899 s after issue and refused from 900 s on. Refused as well: any
change to the id, `exp` or `sig`, a malformed `exp`/`sig`, and an `exp` more than 900 s
ahead of service time (a URL this service never issued).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import re
import secrets
from pathlib import Path
from typing import Final
from urllib.parse import urlencode

from service.clock import Clock

LIFETIME_S: Final = 900  # Final: the literal 900, the `expires_in` the document states
SECRET_FILE = "asset-url-secret"
_EXP = re.compile(r"^[0-9]{1,12}$")
_SIG = re.compile(r"^[0-9a-f]{64}$")


def load_secret(data_dir: str | Path, name: str = SECRET_FILE) -> bytes:
    """The signing secret `name`, created once (mode 0600) on first use."""
    path = Path(data_dir) / name
    if not path.exists():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
                f.flush()
                os.fsync(f.fileno())
    os.chmod(path, 0o600)
    text = path.read_text().strip()
    if len(text) < 32:
        raise RuntimeError(f"{path}: signing secret is too short")
    return text.encode()


class UrlSigner:
    def __init__(self, secret: bytes, base_url: str, clock: Clock) -> None:
        self._secret = secret
        self.base_url = base_url.rstrip("/")
        self.clock = clock

    def _sig(self, asset_id: str, exp: int) -> str:
        return hmac.new(self._secret, f"{asset_id}.{exp}".encode(), hashlib.sha256).hexdigest()

    def url(self, asset_id: str) -> str:
        exp = math.floor(self.clock.now()) + LIFETIME_S
        query = urlencode({"exp": exp, "sig": self._sig(asset_id, exp)})
        return f"{self.base_url}/files/{asset_id}?{query}"

    def check(self, asset_id: str, exp: str | None, sig: str | None) -> bool:
        """Whether the (id, exp, sig) of a request is a live URL this node issued."""
        if not exp or not sig or not _EXP.match(exp) or not _SIG.match(sig):
            return False
        expires = int(exp)
        now = self.clock.now()
        if now >= expires or expires - now > LIFETIME_S:
            return False
        return hmac.compare_digest(self._sig(asset_id, expires), sig)
