"""`genservice serve` and `genservice admin ...` (the operator API for a person at a shell)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path

import trio


def _serve(args) -> int:
    from service.config import load_settings
    from service.main import serve

    settings = load_settings(args.config)
    from service.logs import configure

    configure(settings.log_level, settings.log_format)
    from service.catalog.catalog import CatalogError, load_catalog
    from service.node import check_catalog

    try:  # a bad catalog stops the start with its own lines, before anything is opened
        check_catalog(load_catalog(settings.catalog_file))
    except CatalogError as e:
        for line in str(e).splitlines():
            print(f"genservice: {line}", file=sys.stderr)
        return 2

    async def run():
        shutdown = trio.Event()

        async def on_signals(task_status=trio.TASK_STATUS_IGNORED):
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                task_status.started()
                async for _ in signals:
                    logging.getLogger("service").info("shutting down")
                    shutdown.set()
                    return

        async with trio.open_nursery() as n:
            await n.start(on_signals)
            await serve(settings, shutdown=shutdown)
            n.cancel_scope.cancel()

    trio.run(run)
    return 0


def _admin(args) -> int:
    import httpx

    from service.config import load_settings
    from service.main import ensure_operator_token

    settings = load_settings(args.config)
    if not settings.operator_token:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        settings.operator_token = ensure_operator_token(settings)
    base = (args.url or settings.public_base_url).rstrip("/") + "/operator/v1"
    method, path, payload = args.handler(args)
    resp = httpx.request(method, base + path, json=payload,
                         headers={"Authorization": f"Bearer {settings.operator_token}"}, timeout=30)
    if resp.content:
        print(json.dumps(resp.json(), indent=2))
    return 0 if resp.is_success else 1


def _backup(args) -> int:
    from service.config import load_settings
    from service.storage.backup import BackupError, backup

    try:
        settings = load_settings(args.config)
        print(json.dumps(backup(settings.data_dir, args.dest, settings.asset_store), indent=2))
    except BackupError as e:
        print(f"backup failed: {e}", file=sys.stderr)
        return 1
    return 0


def _restore(args) -> int:
    from service.config import load_settings
    from service.storage.backup import BackupError, restore

    try:
        print(json.dumps(restore(args.src, load_settings(args.config).data_dir), indent=2))
    except BackupError as e:
        print(f"restore failed: {e}", file=sys.stderr)
        return 1
    return 0


def _restore_replica(args) -> int:
    """`genservice admin restore-replica DATA_DIR`: the newest replicated database (service/replica.py)."""
    from service.config import load_settings
    from service.replica import ReplicaError, restore

    try:
        restore(load_settings(args.config), Path(args.data_dir))
    except ReplicaError as e:
        print(f"restore-replica failed: {e}", file=sys.stderr)
        return 1
    print(f"restored the newest replicated database into {args.data_dir}")
    return 0


def add_restore_replica(asub) -> None:
    rr = asub.add_parser("restore-replica", help="restore the newest replicated database into an absent or empty DATA_DIR")
    rr.add_argument("data_dir")
    rr.set_defaults(func=_restore_replica)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="genservice")
    p.add_argument("--config", help="TOML settings file (keys as GENSERVICE_* names, lower case)")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="start the HTTP service and every actor")
    s.set_defaults(func=_serve)

    a = sub.add_parser("admin", help="call the operator API")
    a.add_argument("--url", help="service base URL (default: GENSERVICE_BASE_URL or host:port)")
    asub = a.add_subparsers(dest="admin_command", required=True)

    def cmd(name, handler, *arguments, help=None):
        c = asub.add_parser(name, help=help)
        for names, kw in arguments:
            c.add_argument(*names, **kw)
        c.set_defaults(func=_admin, handler=handler)

    cmd("create-org", lambda a: ("POST", "/organizations",
                                 {"name": a.name, "owner_email": a.owner_email, "approved": not a.pending}),
        (("name",), {}), (("owner_email",), {}), (("--pending",), {"action": "store_true"}),
        help="create an organization (approved unless --pending)")
    cmd("approve-org", lambda a: ("POST", f"/organizations/{a.org_id}/approve", None), (("org_id",), {}))
    cmd("grant", lambda a: ("POST", f"/organizations/{a.org_id}/grants",
                            {"credits": a.credits, "source": a.source, "expires_at": a.expires_at,
                             "reason": a.reason}),
        (("org_id",), {}), (("credits",), {}), (("--source",), {"default": "promo"}),
        (("--expires-at",), {"default": None}), (("--reason",), {"default": None}))
    cmd("add-member", lambda a: ("POST", f"/organizations/{a.org_id}/members",
                                 {"email": a.email, "role": a.role}),
        (("org_id",), {}), (("email",), {}), (("role",), {}))
    cmd("invite", lambda a: ("POST", f"/organizations/{a.org_id}/invitations", {"email": a.email, "role": a.role}),
        (("org_id",), {}), (("email",), {}), (("role",), {}), help="invite a member (prints the link token)")
    cmd("accept-invite", lambda a: ("POST", "/invitations/accept", {"token": a.token}), (("token",), {}))
    cmd("set-role", lambda a: ("PATCH", f"/organizations/{a.org_id}/members/{a.user_id}", {"role": a.role}),
        (("org_id",), {}), (("user_id",), {}), (("role",), {}))
    cmd("remove-member", lambda a: ("DELETE", f"/organizations/{a.org_id}/members/{a.user_id}", None),
        (("org_id",), {}), (("user_id",), {}))
    cmd("pending", lambda a: ("GET", "/organizations?status=pending", None),
        help="list sign-ups waiting for approval (approve with approve-org)")
    cmd("reset-password", lambda a: ("POST", "/password-resets", {"email": a.email}), (("email",), {}),
        help="print a one-hour password reset link for EMAIL (for nodes without SMTP)")
    cmd("pay-topup", lambda a: ("POST", f"/topups/{a.topup_id}/pay", None), (("topup_id",), {}))
    b = asub.add_parser("backup", help="copy the running node's database and files into DEST (on its machine)")
    b.add_argument("dest")
    b.set_defaults(func=_backup)
    r = asub.add_parser("restore", help="restore a backup into the (empty) data directory; the node must be stopped")
    r.add_argument("src")
    r.set_defaults(func=_restore)
    add_restore_replica(asub)
    cmd("rotate-node-key", lambda a: ("POST", "/node-key/rotate", None),
        help="seal every stored secret with a new node key (the old key file is replaced)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
