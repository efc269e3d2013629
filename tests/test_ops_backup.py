"""Backups under writes and restores of what is not a good backup (service/storage/backup.py;
docs/operator.md, "Backups, replica and settings: decisions")."""

from __future__ import annotations

import json
import sqlite3

import pytest

from service.storage import backup as backup_mod
from service.storage.backup import BackupError, backup, restore


def make_db(data) -> None:
    data.mkdir(mode=0o700, exist_ok=True)
    conn = sqlite3.connect(data / "genservice.db")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE assets (sha256 TEXT)")
    conn.execute("CREATE TABLE t (x TEXT)")
    conn.executemany("INSERT INTO t VALUES (?)", [("x" * 1000,) for _ in range(6000)])  # ~1,500 pages
    conn.commit()
    conn.close()


class WritesBetweenSteps:
    """The node's source connection, with a commit by another connection after every step of
    the copy (what a busy node does while a backup runs)."""

    def __init__(self, conn, path) -> None:
        self.conn, self.path, self.steps = conn, path, 0

    def backup(self, target, **kw):
        writer = sqlite3.connect(self.path)

        def progress(status, remaining, total):
            self.steps += 1
            if self.steps > 200:
                raise RuntimeError("the copy restarts after every write and never ends")
            writer.execute("INSERT INTO t VALUES ('written during the backup')")
            writer.commit()

        try:
            return self.conn.backup(target, **{**kw, "progress": progress})
        finally:
            writer.close()

    def __getattr__(self, name):
        return getattr(self.conn, name)


def test_a_backup_under_constant_writes_ends_with_one_point_in_time(tmp_path, monkeypatch):
    data = tmp_path / "data"
    make_db(data)
    real = sqlite3.connect

    def connect(target, *a, **kw):
        conn = real(target, *a, **kw)
        return WritesBetweenSteps(conn, data / "genservice.db") if "mode=ro" in str(target) else conn

    monkeypatch.setattr(backup_mod.sqlite3, "connect", connect)
    backup(data, tmp_path / "b")
    monkeypatch.undo()
    copy = sqlite3.connect(tmp_path / "b" / "genservice.db")
    assert copy.execute("SELECT count(*) FROM t WHERE x = 'x' || substr(x, 2)").fetchone()[0] >= 6000
    assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.fixture
def good_backup(tmp_path):
    data = tmp_path / "data"
    make_db(data)
    backup(data, tmp_path / "b")
    return tmp_path / "b"


def test_a_truncated_database_is_refused_and_nothing_is_written(good_backup, tmp_path):
    db = good_backup / "genservice.db"
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    with pytest.raises(BackupError) as e:
        restore(good_backup, tmp_path / "new")
    assert str(e.value) == f"{db} is damaged or truncated: not a usable SQLite database"
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(("name", "content", "message"), [
    ("genservice.db", b"this is not sqlite" * 100, "is damaged or truncated: not a usable SQLite database"),
    ("backup.json", b'{"made_at": ', "is damaged: not JSON"),
])
def test_a_damaged_file_of_a_backup_is_refused(good_backup, tmp_path, name, content, message):
    (good_backup / name).write_bytes(content)
    with pytest.raises(BackupError) as e:
        restore(good_backup, tmp_path / "new")
    assert str(e.value).endswith(message)
    assert not (tmp_path / "new").exists()


def test_a_restore_over_a_file_and_a_backup_into_a_file_are_refused(good_backup, tmp_path):
    (tmp_path / "plain").write_text("mine")
    with pytest.raises(BackupError) as e:
        restore(good_backup, tmp_path / "plain")
    assert str(e.value) == f"{tmp_path / 'plain'} is not empty: restore into an empty data directory"
    with pytest.raises(BackupError) as e:
        backup(tmp_path / "data", tmp_path / "plain")
    assert str(e.value) == f"{tmp_path / 'plain'} is not empty: back up into a new directory"
    assert (tmp_path / "plain").read_text() == "mine"


def test_a_restore_writes_nothing_under_the_data_dir_until_complete(good_backup, tmp_path, monkeypatch):
    """A copy that fails half-way leaves the data directory as it was (absent or empty)."""
    (tmp_path / "new").mkdir()
    real = backup_mod.shutil.copy2

    def copy2(src, dst, **kw):
        if str(src).endswith(backup_mod.SECRET_FILE):
            raise OSError(28, "No space left on device")
        return real(src, dst, **kw)

    (good_backup / backup_mod.SECRET_FILE).write_text("secret")
    monkeypatch.setattr(backup_mod.shutil, "copy2", copy2)
    with pytest.raises(BackupError, match="^cannot restore into .*: No space left on device$"):
        restore(good_backup, tmp_path / "new")
    assert list((tmp_path / "new").iterdir()) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".new")] == []
    assert json.loads((good_backup / "backup.json").read_text())
