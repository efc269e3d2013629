"""Secrets at rest (reliability.md S4, S8): a real `genservice serve` at DEBUG log level,
its log in a file, creates organizations, members, API keys (POST /v1/api-keys, bound and
unbound, paused, revoked) and account webhooks, and signs deliveries with their secrets.
Then a byte scan of the database file, its WAL and shared-memory file, every other file in
the data directory and the log finds:

- no `aak_[0-9a-f]{48}` text at all, and no key's 48 hex digits in any form (keys are stored
  as raw SHA-256 digests, so nothing at rest reads as a key, not even a key prefix next to
  its digest: the raw digest of each key is found, as a positive control);
- no webhook secret anywhere: not in the log, not in any list or read answer (`GET
  /v1/webhooks`, `/v1/webhooks/{id}`, `/deliveries`), and not in the database (a secret must
  be kept to sign, so it is kept sealed with the node key, a file outside the database:
  service/sealing.py); the deliveries were signed with them all the same;
- no token of a webhook URL's query in the log (httpx would log each request's URL);
- the same after a clean shutdown (SIGTERM, exit 0); the WAL file stays after shutdown, so
  both moments scan the database file and its WAL.
"""

from __future__ import annotations

import hashlib
import re
import secrets as secrets_module
import signal
import stat
from pathlib import Path

import httpx

from test_hostile_input import OPERATOR, real_server
from test_webhooks_receiver import receiver
from waiting import wait_until

KEY_RE = re.compile(rb"aak_[0-9a-f]{48}")
URL_TOKEN = "qs_" + secrets_module.token_hex(16)  # a token in a webhook URL's query: theirs, never in our log


def files_of(data_dir: Path, log: Path) -> dict[str, bytes]:
    out = {"log": log.read_bytes()}
    for path in sorted(data_dir.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(data_dir))] = path.read_bytes()
    return out


def scan(files: dict[str, bytes], keys: list[str], secrets: list[str]) -> dict:
    found = {"key_pattern": [], "key_hex": [], "secret": [], "digest": set()}
    for name, data in files.items():
        if name == "node-key":
            continue  # the sealing key itself: outside the database by design
        for m in KEY_RE.finditer(data):
            found["key_pattern"].append((name, m.group().decode()))
        for key in keys:
            if key[4:].encode() in data or key[4:].upper().encode() in data:
                found["key_hex"].append((name, key[:12]))
            if hashlib.sha256(key.encode()).digest() in data:
                found["digest"].add(key)
        for secret in secrets:
            if secret.encode() in data or secret[6:].encode() in data:
                found["secret"].append((name, secret[:12]))
    return found


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
                                       json={"url": rx.url(f"/ok?org={i}&n={n}&token={URL_TOKEN}"),
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
            await wait_until(lambda: len(rx.hits) >= 3 * 2 * (1 + 5 + 1), 10, every=0.05)

            running = files_of(server.data_dir, server.log)
            assert "genservice.db-wal" in {Path(n).name for n in running} or any(n.endswith("-wal") for n in running)
            db_name = next(n for n in running if n.endswith(".db") or n.endswith(".sqlite"))
            mode = stat.S_IMODE((server.data_dir / db_name).stat().st_mode)
            server.proc.send_signal(signal.SIGTERM)
            assert server.proc.wait(timeout=30) == 0
            stopped = files_of(server.data_dir, server.log)

    log_text = stopped["log"].decode(errors="replace")
    assert " DEBUG " in log_text, "the server did not log at DEBUG level"
    assert any(URL_TOKEN in h.target for h in rx.hits)  # the URL with its token was called
    assert URL_TOKEN not in log_text
    for label, files in (("running", running), ("stopped", stopped)):
        found = scan(files, keys + ["aak_" + "f" * 48], secrets)
        assert found["key_pattern"] == [], (label, found["key_pattern"][:5])
        assert found["key_hex"] == [], (label, found["key_hex"][:5])
        assert found["secret"] == [], (label, found["secret"][:5])
        # positive control: every real key is stored, as its raw SHA-256 digest
        assert found["digest"] >= set(keys), (label, len(found["digest"]))
    for text in answers:
        assert not KEY_RE.search(text.encode())
        assert not any(s in text for s in secrets)
    print(f"\n{len(keys)} keys, {len(secrets)} webhook secrets; log {len(stopped['log'])} bytes"
          f" ({log_text.count(' DEBUG ')} DEBUG lines); files scanned running: {sorted(running)},"
          f" stopped: {sorted(stopped)}; database file mode {oct(mode)}")
