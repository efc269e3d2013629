"""Probe L10: backups were written 0644. A backup holds every secret its database does, so
what a backup or a restore writes is the node user's alone: directories 0700, files 0600,
whatever the umask of the shell that ran it."""

from __future__ import annotations

import os
import stat

from service.assets.signing import SECRET_FILE
from service.storage.backup import backup, restore
from service.storage.migrate import apply_all


def modes(root) -> dict[str, int]:
    out = {".": stat.S_IMODE(os.stat(root).st_mode)}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(base, name)
            out[os.path.relpath(path, root)] = stat.S_IMODE(os.stat(path).st_mode)
    return out


def test_backup_and_restore_write_0600_files_in_0700_directories(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    old = os.umask(0o022)  # a usual login shell's
    try:
        apply_all(data / "genservice.db")
        (data / SECRET_FILE).write_text("s3cret\n")
        os.chmod(data / SECRET_FILE, 0o644)  # a copy keeps its source's mode: not here
        (tmp_path / "empty").mkdir(mode=0o755)
        for dest in (tmp_path / "backups" / "one", tmp_path / "empty"):
            backup(data, dest)
            got = modes(dest)
            assert {"genservice.db", "backup.json", SECRET_FILE} <= set(got)
            assert {k: v for k, v in got.items() if v != (0o700 if (dest / k).is_dir() else 0o600)} == {}
        assert stat.S_IMODE(os.stat(tmp_path / "backups").st_mode) == 0o700  # made by the backup too
        restored = tmp_path / "restored"
        restore(tmp_path / "empty", restored)
        got = modes(restored)
        assert {"genservice.db", SECRET_FILE} <= set(got)
        assert {k: v for k, v in got.items() if v != (0o700 if (restored / k).is_dir() else 0o600)} == {}
        assert os.umask(0o022) == 0o022  # the caller's umask is given back
    finally:
        os.umask(old)
