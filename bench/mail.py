"""Mail outbox throughput (issue 14), loopback only, never in CI.

    .venv/bin/python bench/mail.py [--mails 200]

Queues `--mails` mails in one transaction of a fresh outbox (real SQLite file, the node's
writer) and times until the dispatcher has recorded every one: first to a local aiosmtpd
server with STARTTLS and AUTH (tests/smtp_server.py; one SMTP connection per mail, at most
service.mail.outbox.CONCURRENCY at once), then with no SMTP host (mails to the log, here
silenced). Prints mails per second for both; last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from service.clock import Clock  # noqa: E402
from service.config import Settings  # noqa: E402
from service.mail import messages, outbox  # noqa: E402
from service.sealing import NodeKey  # noqa: E402
from service.storage import mail as mail_sql  # noqa: E402
from service.storage.db import Store  # noqa: E402
from service.storage.migrate import apply_all  # noqa: E402


async def run_once(workdir: Path, n: int, smtp_settings: dict) -> float:
    settings = Settings(data_dir=workdir, **smtp_settings)
    apply_all(settings.db_path)
    store = Store(settings.db_path)
    clock = Clock()
    box = outbox.MailOutbox(store, clock, settings, NodeKey(workdir / "node-key"))
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        await nursery.start(box.run)
        await box.recover()  # what the node does at start: sending begins after it
        mail = messages.password_reset(60)
        now = clock.iso_now()
        link = box.seal("https://node.test/reset-password?token=x")

        def queue(conn):
            for i in range(n):
                mail_sql.enqueue(conn, None, f"bench{i}@mail.test", mail.kind, mail.subject, mail.text, mail.html,
                                 now, link)

        started = time.perf_counter()
        await store.write(queue)
        while store.scalar("SELECT count(*) FROM emails WHERE state = 'sent'") < n:
            await trio.sleep(0.01)
        elapsed = time.perf_counter() - started
        nursery.cancel_scope.cancel()
    store.close()
    return elapsed


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mails", type=int, default=200)
    args = p.parse_args()
    logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd's per-command lines
    logging.getLogger("service.mail").setLevel(logging.WARNING)
    from smtp_server import SmtpServer

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        server = SmtpServer(tmp).start()
        try:
            (tmp / "a").mkdir()
            smtp_s = trio.run(run_once, tmp / "a", args.mails, server.settings())
        finally:
            server.stop()
        (tmp / "b").mkdir()
        log_s = trio.run(run_once, tmp / "b", args.mails, {})
    out = {"mails": args.mails, "concurrency": outbox.CONCURRENCY,
           "smtp_starttls_auth_mails_per_s": round(args.mails / smtp_s, 1),
           "log_only_mails_per_s": round(args.mails / log_s, 1)}
    print(f"{args.mails} mails over SMTP (STARTTLS + AUTH, one connection each, {outbox.CONCURRENCY} at once): "
          f"{smtp_s:.2f} s, {out['smtp_starttls_auth_mails_per_s']} mails/s")
    print(f"{args.mails} mails to the log (no SMTP host): {log_s:.2f} s, {out['log_only_mails_per_s']} mails/s")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
