"""Catalog reload without a restart (`POST /operator/v1/catalog/reload`, SIGHUP).

The file is read again and put through every start-up check (`service.node.read_catalog`:
TOML and keys, unknown backend, missing workflow, bind target absent, unset `token_env`).
A catalog that fails any check changes nothing: the reasons are returned and the old
catalog stays in force. A good one replaces the whole catalog at once, between two requests
(trio runs one task at a time and nothing here awaits before the swap), for every submit
from then on. Jobs open at that moment keep the model definition they were submitted under
(`Generation.pinned`) and their price (held on the job row at submit). Engine pools follow
the new file (`Engines.reload`): new servers join, removed ones take no new job and leave
once their running jobs end. Streams and requests in flight are not touched.
"""

from __future__ import annotations

import logging

import trio

from service.catalog.catalog import CatalogError
from service.clock import iso
from service.console import ReloadOutcome
from service.node import Node, read_catalog
from service.storage import console as console_sql

log = logging.getLogger(__name__)


async def reload_catalog(node: Node, who: str, address: str = "local") -> ReloadOutcome:
    """Swap the catalog for the file's current content, or keep the old one and say why; the
    outcome goes to the audit log. One reload at a time: another one awaiting an engine's
    first health round would otherwise retire its pool mid-start (a 500) and its outcome,
    written last, would name a catalog no longer in force."""
    async with node.console.reloading:
        outcome = await _reload(node, who)
        detail = "in force" if outcome.ok else "refused: " + "; ".join(outcome.problems)[:1000]
        await node.console.audit(who, address, "catalog.reload", node.catalog.source, detail)
        return outcome


async def _reload(node: Node, who: str) -> ReloadOutcome:
    at = iso(node.clock.now())
    try:
        catalog = read_catalog(node.settings.catalog_file)
    except CatalogError as e:
        problems = [line.strip() for line in str(e).splitlines() if line.strip()]
        outcome = ReloadOutcome(at, False, [m.id for m in node.catalog.models], problems, who)
        node.console.last_reload = outcome
        log.warning("catalog reload refused; the catalog in force is unchanged: %s", "; ".join(problems))
        return outcome
    gen = node.generation
    old = node.catalog
    pinned = {}
    for row in console_sql.open_job_models(node.store):
        model = gen.pinned.get(row["id"]) or old.model(row["model"])
        if model is not None:
            pinned[row["id"]] = model
    gen.pinned = pinned
    node.catalog = catalog
    gen.catalog = catalog
    await node.engines.reload(catalog)
    outcome = ReloadOutcome(at, True, [m.id for m in catalog.models], [], who)
    node.console.last_reload = outcome
    log.info("catalog reloaded from %s: %d models", catalog.source, len(catalog.models))
    return outcome


async def reload_on_sighup(node: Node, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """SIGHUP reloads the catalog, as the console's button does (outcome in the log and the
    audit log, from "local")."""
    import signal

    with trio.open_signal_receiver(signal.SIGHUP) as signals:
        task_status.started()
        async for _ in signals:
            try:
                await reload_catalog(node, "SIGHUP")
            except Exception:  # noqa: BLE001 - e.g. the audit's write on a full disk: never the node's end
                log.exception("the catalog reload asked by SIGHUP failed")
