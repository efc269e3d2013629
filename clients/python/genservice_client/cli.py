"""`genservice-client`: the package's calls from a shell. The key and address come from
GENSERVICE_API_KEY / GENSERVICE_URL, else the config file (`~/.config/genservice/client.toml`
or GENSERVICE_CONFIG: `api_key = "..."`, `url = "..."`). `--json` prints the answer as JSON
for scripts. Every failure is one line on stderr, never a traceback (which could show the
key): exit 1 for a refusal (with the spec's code), a network error, a timeout, an unreadable
file; 2 for a missing key or address, or a config file that is not TOML; 130 on Ctrl-C.
A config file other users can open is warned of (it holds the key).
The key is masked (`***`) in every message.
`genservice-client completion bash|zsh|tcsh` prints the shell's completion script (shtab,
from this parser: it cannot fall behind the commands)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib
from pathlib import Path

import httpx
import shtab
from pydantic import BaseModel
from tqdm import tqdm

from .client import Client
from .errors import GenserviceError
from .models import JobStatus, ProgressEvent


class Failed(Exception):
    """A failure told as one line (`genservice-client: ...`) and an exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def _config() -> dict:
    path = Path(os.environ.get("GENSERVICE_CONFIG") or Path.home() / ".config" / "genservice" / "client.toml")
    try:
        cfg = tomllib.loads(path.read_text()) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:  # its text could hold the key: not shown
        raise Failed(f"cannot read the config file {path}: {e}", 2) from None
    if cfg.get("api_key") and os.name == "posix" and path.stat().st_mode & 0o077:  # as ssh does with its keys
        print(f"genservice-client: warning: {path} holds the key and other users have access to it (chmod 600 it)",
              file=sys.stderr)
    return cfg


def _origin(url: str) -> str:
    """The address without a path or credentials."""
    try:
        u = httpx.URL(url)
        return f"{u.scheme}://{u.host}" + (f":{u.port}" if u.port else "")
    except httpx.InvalidURL:
        return "the node"


def _told(e: BaseException, url: str) -> Failed:
    """An exception of a call as the line to print."""
    if isinstance(e, Failed):
        return e
    if isinstance(e, GenserviceError):
        return Failed(f"{e.status} {e.code}: {e.message}")
    if isinstance(e, (httpx.TransportError, httpx.InvalidURL)):
        return Failed(f"could not reach {_origin(url)}: {e or type(e).__name__}")
    if isinstance(e, TimeoutError):
        return Failed(f"timed out: {e}")
    if isinstance(e, OSError):
        return Failed(f"{e.strerror or e}: {e.filename}" if e.filename else str(e))
    if isinstance(e, KeyboardInterrupt):
        return Failed("interrupted", 130)
    return Failed(f"unexpected {type(e).__name__}: {e}")


def _pairs(items: list[str]) -> dict:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected NAME=VALUE, got {item!r}")
        try:
            out[name] = json.loads(value)  # numbers, lists
        except ValueError:
            out[name] = value
    return out


def _plain(data):
    if isinstance(data, BaseModel):
        return data.model_dump(mode="json")
    return [_plain(x) for x in data] if isinstance(data, list) else data


def _show(args, data, line: str) -> None:
    print(json.dumps(_plain(data), indent=2) if args.json else line)


def _generate(c: Client, args) -> None:
    bar = None if args.json else tqdm(total=1.0, bar_format="{desc:>10} {percentage:3.0f}%|{bar}|",
                                           file=sys.stderr)

    def on_event(name: str, data) -> None:
        if bar is None:
            return
        if isinstance(data, ProgressEvent) and data.max:
            bar.n = min(data.value / data.max, 1.0)
            bar.set_description_str(data.step or "")
        elif isinstance(data, JobStatus):
            bar.set_description_str(data.status)
            if data.status == "completed":
                bar.n = 1.0
        bar.refresh()

    try:
        job = c.generate(args.capability, args.prompt, model=args.model, on_event=on_event, **_pairs(args.param))
    finally:
        if bar is not None:
            bar.close()
    if args.output:
        c.download(job.outputs[0], args.output)
    _show(args, job, f"{job.request_id} completed, {job.credits.actual} credits"
          + (f", saved {args.output}" if args.output else ""))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="genservice-client", description="A genservice node from the shell.")
    ap.add_argument("--json", action="store_true", help="print answers as JSON")
    ap.add_argument("--url", help="the node's address (else GENSERVICE_URL or the config file)")
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="submit a job and wait for it")
    g.add_argument("capability")
    g.add_argument("prompt")
    g.add_argument("-o", "--output", help="save the first output here").complete = shtab.FILE
    g.add_argument("--model")
    g.add_argument("--param", action="append", default=[], help="NAME=VALUE (aspect_ratio=16:9, seed=3)")
    r = sub.add_parser("run", help="run a product and wait for it")
    r.add_argument("slug")
    r.add_argument("--input", action="append", default=[], help="NAME=VALUE")
    j = sub.add_parser("jobs", help="jobs of the project")
    j.add_argument("action", choices=["list"])
    j.add_argument("--limit", type=int, default=20)
    sub.add_parser("balance", help="the credit balance")
    u = sub.add_parser("upload", help="upload a file as an asset")
    u.add_argument("file").complete = shtab.FILE
    u.add_argument("--content-type")
    c = sub.add_parser("completion", help="print the shell's completion script")
    c.add_argument("shell", choices=shtab.SUPPORTED_SHELLS)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.command == "completion":
        print(shtab.complete(ap, shell=args.shell))
        return 0
    key: str | None = os.environ.get("GENSERVICE_API_KEY")
    url: str | None = args.url or os.environ.get("GENSERVICE_URL")
    try:
        cfg = _config()
        key, url = key or cfg.get("api_key"), url or cfg.get("url")
        if not key or not url:
            raise Failed("set GENSERVICE_API_KEY and GENSERVICE_URL (or the config file)", 2)
        return _command(args, key, url)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - any failure is a line, never a traceback
        failed = _told(e, str(url))
        message = str(failed).replace(key, "***") if isinstance(key, str) and key else str(failed)
        print(f"genservice-client: {message}", file=sys.stderr)
        return failed.status


def _command(args, key: str, url: str) -> int:
    with Client(key, url) as c:
        if args.command == "generate":
            _generate(c, args)
        elif args.command == "run":
            run = c.products.run(args.slug, **_pairs(args.input))
            _show(args, run, f"{run.id} {run.status}")
            if run.status != "completed":
                return 1
        elif args.command == "jobs":
            jobs = c.jobs(args.limit)
            _show(args, jobs, "\n".join(f"{x.request_id}  {x.status:<10} {x.model}" for x in jobs))
        elif args.command == "balance":
            bal = c.balance()
            _show(args, bal, f"{bal.available} credits available")
        elif args.command == "upload":
            asset = c.upload(args.file, content_type=args.content_type)
            _show(args, asset, f"{asset.id} {asset.content_type}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
