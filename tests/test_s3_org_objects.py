"""Objects are kept per organization: two organizations storing the same bytes get objects of
their own (a presigned download's Last-Modified told one that the other stored them, and
when), one organization's copies are still one object, rows stored before (the node-wide
object of their digest) stay readable, and the start-up sweep tells the two shapes apart."""

from __future__ import annotations

import hashlib
import math
import sqlite3
import time
import uuid
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from s3_server import client, own_s3, s3, s3_session  # noqa: F401 - fixtures
from test_asset_store import fetch_content, objects, store_settings
from test_generation_support import running_node, submit, upload_ok, wait_status
from test_media_samples import image_bytes

from service.assets.s3 import S3Store
from service.storage.migrate import apply_all


def bucket_of(settings: dict) -> str:
    return settings["asset_store"].removeprefix("s3://").split("/")[0]


async def test_two_organizations_storing_the_same_bytes_get_objects_of_their_own(s3, tmp_path):
    settings = store_settings(s3)
    png = image_bytes("PNG", 14, 14)
    async with running_node(tmp_path, **settings) as n:
        a, b = await n.create_org(), await n.create_org()
        first = await upload_ok(n, a["api_key"], png)
        # A's object, marked so a download can tell whose object it read
        [key_a] = objects(s3, settings)
        bucket = bucket_of(settings)
        client(s3.endpoint).copy_object(Bucket=bucket, Key=key_a, CopySource={"Bucket": bucket, "Key": key_a},
                                        Metadata={"stored-by": "a"}, MetadataDirective="REPLACE")
        before = math.floor(time.time())
        second = await upload_ok(n, b["api_key"], png)
        got_a = await fetch_content(n, a["api_key"], first["id"])
        got_b = await fetch_content(n, b["api_key"], second["id"])
        assert got_a.content == got_b.content == png
        assert got_a.headers["x-amz-meta-stored-by"] == "a"
        assert urlsplit(str(got_a.url)).path != urlsplit(str(got_b.url)).path
        assert "x-amz-meta-stored-by" not in got_b.headers
        assert parsedate_to_datetime(got_b.headers["Last-Modified"]).timestamp() >= before
        assert len(objects(s3, settings)) == 2
        await upload_ok(n, a["api_key"], png)  # the same bytes again in one organization: one object
        assert len(objects(s3, settings)) == 2


async def test_a_row_stored_before_reads_the_node_wide_object_after_a_restart(s3, tmp_path):
    """A row from before objects were per organization (migrated: `shared_object` = 1) names
    the node-wide object of its digest: served, used as an input, kept by the sweep."""
    settings = store_settings(s3)
    png = image_bytes("PNG", 20, 10)
    sha = hashlib.sha256(png).hexdigest()
    legacy = f"node1/{sha[:2]}/{sha[2:4]}/{sha}"
    async with running_node(tmp_path, **settings) as n1:
        org = await n1.create_org()
        asset = await upload_ok(n1, org["api_key"], png)
        [scoped] = objects(s3, settings)
        assert scoped == f"node1/orgs/{org['organization_id']}/{sha[:2]}/{sha[2:4]}/{sha}"
    # as the node before this change left it: the object under its digest alone, the row marked
    c = client(s3.endpoint)
    bucket = bucket_of(settings)
    c.copy_object(Bucket=bucket, Key=legacy, CopySource={"Bucket": bucket, "Key": scoped})
    c.delete_object(Bucket=bucket, Key=scoped)
    with sqlite3.connect(tmp_path / "genservice.db") as db:
        db.execute("UPDATE assets SET shared_object = 1")
    async with running_node(tmp_path, **settings) as n2:
        assert objects(s3, settings) == [legacy]  # the sweep kept it
        got = await fetch_content(n2, org["api_key"], asset["id"])
        assert got.content == png
        rid = (await submit(n2, org["api_key"], {"inputs": {"media": [asset["id"]]}, "resolution": "2x"},
                            path="/v1/generation/capabilities/media.upscale"))["request_id"]
        st = await wait_status(n2, org["api_key"], rid)
        assert st["status"] == "completed", st


def test_the_migration_marks_existing_rows_as_reading_the_node_wide_object(tmp_path):
    db_path = tmp_path / "g.db"
    apply_all(db_path)
    with sqlite3.connect(db_path) as db:  # back to the schema before, with one row
        db.execute("ALTER TABLE assets DROP COLUMN shared_object")
        db.execute("DELETE FROM _sqlite_migrations WHERE name = 'm004_asset_shared_object'")
        db.execute("INSERT INTO assets (id, organization_id, project_id, source, kind, content_type, size_bytes, "
                   "sha256, created_at) VALUES ('a1', 'o1', 'p1', 'upload', 'image', 'image/png', 1, ?, 'now')",
                   ["a" * 64])
    apply_all(db_path)
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT shared_object FROM assets").fetchall() == [(1,)]
        db.execute("INSERT INTO assets (id, organization_id, project_id, source, kind, content_type, size_bytes, "
                   "sha256, created_at) VALUES ('a2', 'o1', 'p1', 'upload', 'image', 'image/png', 1, ?, 'now')",
                   ["a" * 64])
        assert db.execute("SELECT shared_object FROM assets WHERE id = 'a2'").fetchall() == [(0,)]


async def test_the_sweep_tells_the_two_shapes_apart(s3, tmp_path):
    """Deleted: an object of either shape no row names. Kept: a named one, a node-wide object
    whose digest any row names, and whatever is not of this store's layout."""
    bucket = s3.bucket()
    store = S3Store(tmp_path, f"s3://{bucket}/p", s3.endpoint)
    org = str(uuid.uuid4())
    named, stray, shared, other = "1" * 64, "2" * 64, "3" * 64, "4" * 64
    keys = {
        "scoped named": store.key(named, org), "scoped stray": store.key(stray, org),
        "legacy stray": store.key(stray), "legacy of a scoped row": store.key(shared),
        "not an org id": f"p/orgs/node-x/44/44/{other}", "another prefix": f"q/orgs/{org}/11/11/{named}",
    }
    for k in keys.values():
        store.client.put_object(Bucket=bucket, Key=k, Body=b"x")
    referenced = {named, f"{org}/{named}", shared, f"{org}/{shared}"}
    assert store.remove_unreferenced(referenced) == 2
    left = {o["Key"] for o in store.client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert left == {v for k, v in keys.items() if "stray" not in k}
