"""`genservice serve` and `genservice admin ...` (the operator API for a person at a shell).

Each command imports what it needs inside its function: `admin` loads the settings and
calls the node over HTTP with the standard library, without importing the node itself.

A setting that cannot be used is one line on stderr and exit code 2 for every command
(`main`); a command that refuses its input is one line and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from urllib.parse import quote


def _serve(args) -> int:
    import logging
    import signal

    import trio

    from service.config import load_settings
    from service.main import serve

    settings = load_settings(args.config)
    from service.logs import configure

    configure(settings.log_level, settings.log_format)
    from service.config import unknown_variables

    for warning in unknown_variables():  # a typo leaves a default in force: say so (names only)
        print(f"genservice: warning: {warning}; ignored", file=sys.stderr)
    from service.catalog.catalog import CatalogError
    from service.node import read_catalog

    from service.main import check_settings

    check_settings(settings)  # a SettingsError: one line from `main`
    try:  # a bad catalog stops the start with its own lines, before anything is opened
        read_catalog(settings.catalog_file)
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
    import urllib.error
    import urllib.request

    from service.config import load_settings
    from service.local_node import ensure_operator_token, node_url, private_data_dir

    from service.config import SettingsError

    try:
        settings = load_settings(args.admin_config or args.config)
    except SettingsError:
        raise  # one line from `main`
    except (OSError, ValueError) as e:
        print("genservice admin: cannot read the settings: " + " ".join(str(e).split()), file=sys.stderr)
        return 2
    if not settings.operator_token:
        private_data_dir(settings)
        settings.operator_token = ensure_operator_token(settings)
    base = node_url(settings, args.url)
    method, path, payload = args.handler(args)
    body = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(base + "/operator/v1" + path, data=body, method=method, headers={
        "Authorization": f"Bearer {settings.operator_token}", "Content-Type": "application/json",
        "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, content = resp.status, resp.read()
    except urllib.error.HTTPError as e:  # the node answered with an error: show its body
        status, content = e.code, e.read()
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        print(f"genservice admin: cannot reach the node at {base} ({reason}). Is `genservice serve` running? "
              "Give its address with --url, or the same --config and GENSERVICE_* settings as serve.",
              file=sys.stderr)
        return 2
    if content:
        try:
            print(json.dumps(json.loads(content), indent=2))
        except ValueError:
            print(f"genservice admin: {base} answered {status} with a body that is not JSON: is it a genservice node?",
                  file=sys.stderr)
            return 2
    return 0 if 200 <= status < 300 else 1


def _add_model(args) -> int:
    from service.add_model import add_model
    from service.config import load_settings

    return add_model(args, load_settings(args.admin_config or args.config))


def _backup(args) -> int:
    from service.config import load_settings
    from service.storage.backup import BackupError, backup

    try:
        settings = load_settings(args.admin_config or args.config)
        print(json.dumps(backup(settings.data_dir, args.dest, settings.asset_store), indent=2))
    except BackupError as e:
        print(f"backup failed: {e}", file=sys.stderr)
        return 1
    return 0


def _restore(args) -> int:
    from service.config import load_settings
    from service.storage.backup import BackupError, restore

    try:
        print(json.dumps(restore(args.src, load_settings(args.admin_config or args.config).data_dir), indent=2))
    except BackupError as e:
        print(f"restore failed: {e}", file=sys.stderr)
        return 1
    return 0


def _restore_replica(args) -> int:
    """`genservice admin restore-replica DATA_DIR`: the newest replicated database (service/replica.py)."""
    from service.config import load_settings
    from service.replica import ReplicaError, restore

    try:
        restore(load_settings(args.admin_config or args.config), Path(args.data_dir))
    except ReplicaError as e:
        print(f"restore-replica failed: {e}", file=sys.stderr)
        return 1
    print(f"restored the newest replicated database into {args.data_dir}")
    return 0


def add_restore_replica(asub) -> None:
    rr = asub.add_parser("restore-replica", help="restore the newest replicated database into an absent or empty DATA_DIR")
    rr.add_argument("data_dir")
    rr.set_defaults(func=_restore_replica)


def _seg(value: str) -> str:
    """An id as one URL path segment: with `/`, `?` or `#` it would reach another route."""
    return quote(value, safe="")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="genservice")
    p.add_argument("--config", help="TOML settings file (keys as GENSERVICE_* names, lower case)")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="start the HTTP service and every actor")
    s.set_defaults(func=_serve)

    a = sub.add_parser("admin", help="call the operator API")
    a.add_argument("--url", help="the node's base URL (default: GENSERVICE_BASE_URL, else GENSERVICE_HOST/PORT "
                                 "when set, else the URL the node on this data directory listens on)")
    a.add_argument("--config", dest="admin_config", help="TOML settings file, as for serve")
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
    cmd("approve-org", lambda a: ("POST", f"/organizations/{_seg(a.org_id)}/approve", None), (("org_id",), {}))
    cmd("grant", lambda a: ("POST", f"/organizations/{_seg(a.org_id)}/grants",
                            {"credits": a.credits, "source": a.source, "expires_at": a.expires_at,
                             "reason": a.reason}),
        (("org_id",), {}), (("credits",), {}), (("--source",), {"default": "promo"}),
        (("--expires-at",), {"default": None}), (("--reason",), {"default": None}))
    cmd("add-member", lambda a: ("POST", f"/organizations/{_seg(a.org_id)}/members",
                                 {"email": a.email, "role": a.role}),
        (("org_id",), {}), (("email",), {}), (("role",), {}))
    cmd("invite", lambda a: ("POST", f"/organizations/{_seg(a.org_id)}/invitations",
                             {"email": a.email, "role": a.role}),
        (("org_id",), {}), (("email",), {}), (("role",), {}), help="invite a member (prints the link token)")
    cmd("accept-invite", lambda a: ("POST", "/invitations/accept", {"token": a.token}), (("token",), {}))
    cmd("set-role", lambda a: ("PATCH", f"/organizations/{_seg(a.org_id)}/members/{_seg(a.user_id)}",
                               {"role": a.role}),
        (("org_id",), {}), (("user_id",), {}), (("role",), {}))
    cmd("remove-member", lambda a: ("DELETE", f"/organizations/{_seg(a.org_id)}/members/{_seg(a.user_id)}", None),
        (("org_id",), {}), (("user_id",), {}))
    cmd("pending", lambda a: ("GET", "/organizations?status=pending", None),
        help="list sign-ups waiting for approval (approve with approve-org)")
    cmd("reset-password", lambda a: ("POST", "/password-resets", {"email": a.email}), (("email",), {}),
        help="print a one-hour password reset link for EMAIL (for nodes without SMTP)")
    cmd("pay-topup", lambda a: ("POST", f"/topups/{_seg(a.topup_id)}/pay", None), (("topup_id",), {}))
    m = asub.add_parser("add-model", help="add an engine model to the catalog file (ComfyUI: from a workflow)")
    m.add_argument("engine", choices=["comfyui"])
    m.add_argument("--id", required=True, help="the model id clients ask for")
    m.add_argument("--url", required=True, dest="engine_url", help="the ComfyUI server's base URL")
    m.add_argument("--workflow", required=True, help="the workflow exported with \"Save (API)\"")
    m.add_argument("--price", required=True, help="credits per job (e.g. 4.00)")
    m.add_argument("--capability", default="image.generate")
    m.add_argument("--resolution", help="the tier's name (default: WxH of the workflow's latent)")
    m.add_argument("--description")
    m.add_argument("--catalog", help="catalog file to write (default: GENSERVICE_CATALOG_FILE, "
                                     "else DATA_DIR/catalog.toml seeded with the built-in models)")
    m.add_argument("--no-prompt", action="store_true", help="import a graph that takes no prompt")
    m.set_defaults(func=_add_model)
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
    from service.config import SettingsError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SettingsError as e:
        print(f"genservice: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
