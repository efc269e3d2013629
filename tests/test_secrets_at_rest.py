"""Secrets at rest (reliability.md S4, S8): a real `genservice serve` at DEBUG log level,
its log in a file, creates organizations, members, API keys (POST /v1/api-keys, bound and
unbound, paused, revoked) and account webhooks, and signs deliveries with their secrets.
Then a byte scan of the database file, its WAL and shared-memory file, every other file in
the data directory and the log finds:

- no `aak_[0-9a-f]{48}` text at all, and no key's 48 hex digits in any form (keys are stored
  as SHA-256 digests: the digest of each key is found, as a positive control);
- no webhook secret in the log, and none in any list or read answer (`GET /v1/webhooks`,
  `/v1/webhooks/{id}`, `/deliveries`); a secret must be kept to sign, so it is in the
  database: in the `webhooks.secret` column as the plain `whsec_...` string (an HMAC key
  cannot be stored as a digest), readable only to whoever can read the database file, whose
  mode the test reports;
- the same after a clean shutdown (SIGTERM, exit 0); the WAL file stays after shutdown, so
  both moments scan the database file and its WAL.
"""

from __future__ import annotations

import hashlib
import re
import signal
import stat
from pathlib import Path

import httpx
import trio

from test_hostile_input import OPERATOR, real_server
from test_webhooks_receiver import receiver

KEY_RE = re.compile(rb"aak_[0-9a-f]{48}")
# A key as a token: 48 hex digits and no 49th. In a SQLite record the `key_prefix` column
# ("aak_" + 8 hex) is stored right before the `key_hash` column (64 hex), so the plain
# pattern matches "aak_" + 8 + 40 hex digits of prefix-then-digest: not a key (see
# `adjacent_prefix_and_digest`). Every plain match must be exactly that, and not a token.
KEY_TOKEN_RE = re.compile(rb"aak_[0-9a-f]{48}(?![0-9a-f])")


def files_of(data_dir: Path, log: Path) -> dict[str, bytes]:
    out = {"log": log.read_bytes()}
    for path in sorted(data_dir.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(data_dir))] = path.read_bytes()
    return out


def scan(files: dict[str, bytes], keys: list[str], secrets: list[str]) -> dict:
    found = {"key_pattern": [], "key_hex": [], "secret": [], "digest": set(), "prefix_then_digest": 0}
    explained = adjacent_prefix_and_digest(keys)
    for name, data in files.items():
        for m in KEY_RE.finditer(data):
            if m.group() in explained and not KEY_TOKEN_RE.match(data, m.start()):
                found["prefix_then_digest"] += 1
            else:
                found["key_pattern"].append((name, m.group().decode()))
        for key in keys:
            if key[4:].encode() in data or key[4:].upper().encode() in data:
                found["key_hex"].append((name, key[:12]))
            if hashlib.sha256(key.encode()).hexdigest().encode() in data:
                found["digest"].add(key)
        for secret in secrets:
            if secret.encode() in data or secret[6:].encode() in data:
                found["secret"].append((name, secret[:12]))
    return found


def adjacent_prefix_and_digest(keys: list[str]) -> set[bytes]:
    """The 52 bytes the plain key pattern sees where a key's prefix column meets its digest."""
    return {(k[:12] + hashlib.sha256(k.encode()).hexdigest()[:40]).encode() for k in keys}


async def test_no_key_or_webhook_secret_at_rest_or_in_logs(tmp_path):
    async with receiver(tmp_path) as rx:
        with real_server(tmp_path, GENSERVICE_LOG_LEVEL="DEBUG", GENSERVICE_WEBHOOK_CA_FILE=rx.ca_file,
                         GENSERVICE_WEBHOOK_ALLOW_PRIVATE="1") as server:
            keys: list[str] = []
            secrets: list[str] = []
            answers: list[str] = []  # every response body of a list/read call
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
                async def call(method, path, key=None, **kw):
                    headers = {"Authorization": f"Bearer {key or OPERATOR}"}
                    r = await http.request(method, path, headers=headers, **kw)
                    return r

                r = await call("GET", "/v1/roles", None)
                for i in range(3):
                    r = await call("POST", "/operator/v1/organizations",
                                   json={"name": f"Org {i}", "owner_email": f"owner{i}@secrets.test", "approved": True})
                    assert r.status_code == 201, r.text
                    org = r.json()["data"]
                    owner = org["api_key"]
                    keys.append(owner)
                    for role in ("admin", "member", "read_only"):
                        r = await call("POST", f"/operator/v1/organizations/{org['organization_id']}/members",
                                       json={"email": f"{role}{i}@secrets.test", "role": role})
                        assert r.status_code == 201, r.text
                        keys.append(r.json()["data"]["api_key"])
                    # webhooks first, so api_key.created deliveries are signed with their secrets
                    hook_ids = []
                    for n in range(2):
                        r = await call("POST", "/v1/webhooks", owner,
                                       json={"url": rx.url(f"/ok?org={i}&n={n}"),
                                             "events": ["api_key.created", "api_key.revoked", "member.joined"],
                                             "description": "secrets test"})
                        assert r.status_code == 201, r.text
                        secrets.append(r.json()["webhook"]["secret"])
                        hook_ids.append(r.json()["webhook"]["id"])
                    roles = (await call("GET", "/v1/roles", owner)).json()["data"]
                    made = []
                    for n, role in enumerate([None, *(r["id"] for r in roles)]):
                        body = {"name": f"key {n}"} | ({"role_id": role} if role else {})
                        r = await call("POST", "/v1/api-keys", owner, json=body)
                        assert r.status_code == 201, r.text
                        data = r.json()["data"]
                        keys.append(data["key"] if "key" in data else data["api_key"])
                        made.append(data)
                    # pause one, revoke one, then use every key once (a revoked one gets 401)
                    r = await call("PATCH", f"/v1/api-keys/{made[0]['id']}", owner, json={"is_active": False})
                    assert r.status_code == 200, r.text
                    r = await call("DELETE", f"/v1/api-keys/{made[1]['id']}", owner)
                    assert r.status_code == 204, r.text
                    for hook_id in hook_ids:
                        r = await call("POST", f"/v1/webhooks/{hook_id}/test", owner)
                        assert r.status_code == 201 and r.json()["delivery"]["is_delivered"], r.text
                    for path in ("/v1/webhooks", f"/v1/webhooks/{hook_ids[0]}", f"/v1/webhooks/{hook_ids[0]}/deliveries",
                                 "/v1/api-keys", f"/v1/api-keys/{made[2]['id']}", "/v1/webhooks/events"):
                        r = await call("GET", path, owner)
                        assert r.status_code == 200, (path, r.text)
                        answers.append(r.text)
                for key in keys:
                    r = await call("GET", "/v1/projects", key)
                    assert r.status_code in (200, 401)
                r = await call("GET", "/v1/projects", "aak_" + "f" * 48)  # a key-shaped guess
                assert r.status_code == 401
            assert len(keys) == 3 * (1 + 3 + 5) and len(set(keys)) == len(keys)
            assert all(re.fullmatch(r"aak_[0-9a-f]{48}", k) for k in keys)
            assert all(s.startswith("whsec_") for s in secrets)
            # the receiver got signed deliveries (the secrets were used)
            with trio.fail_after(10):
                while len(rx.hits) < 3 * 2 * (1 + 5 + 1):
                    await trio.sleep(0.05)

            running = files_of(server.data_dir, server.log)
            assert "genservice.db-wal" in {Path(n).name for n in running} or any(n.endswith("-wal") for n in running)
            db_name = next(n for n in running if n.endswith(".db") or n.endswith(".sqlite"))
            mode = stat.S_IMODE((server.data_dir / db_name).stat().st_mode)
            server.proc.send_signal(signal.SIGTERM)
            assert server.proc.wait(timeout=30) == 0
            stopped = files_of(server.data_dir, server.log)

    log_text = stopped["log"].decode(errors="replace")
    assert " DEBUG " in log_text, "the server did not log at DEBUG level"
    for label, files in (("running", running), ("stopped", stopped)):
        found = scan(files, keys + ["aak_" + "f" * 48], secrets)
        assert found["key_pattern"] == [], (label, found["key_pattern"][:5])
        assert found["key_hex"] == [], (label, found["key_hex"][:5])
        in_log = [s for s in found["secret"] if s[0] == "log"]
        assert in_log == [], (label, in_log)
        # positive controls: every real key is stored, as its SHA-256 digest; every secret is stored
        assert found["digest"] >= set(keys), (label, len(found["digest"]))
        assert {s for _, s in found["secret"]} == {s[:12] for s in secrets}, label
    for text in answers:
        assert not KEY_RE.search(text.encode())
        assert not any(s in text for s in secrets)
    where = sorted({name for name, _ in scan(stopped, [], secrets)["secret"]})
    adjacency = scan(stopped, keys, [])["prefix_then_digest"]
    print(f"\n{len(keys)} keys, {len(secrets)} webhook secrets; {adjacency} plain-pattern matches, all"
          f" key_prefix+digest adjacency; log {len(stopped['log'])} bytes"
          f" ({log_text.count(' DEBUG ')} DEBUG lines); files scanned running: {sorted(running)},"
          f" stopped: {sorted(stopped)}; secrets found only in {where}; database file mode {oct(mode)}")
