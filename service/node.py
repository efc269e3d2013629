"""The node: every running part, typed, built in one place.

`build()` below is the only place a part is made, in dependency order, on one screen. A
part that needs another is handed the node and reads the part when it runs (a balance
actor asks `node.balances` only once messages flow), so the order below is the order of
construction, not of use.

Who owns which state (one owner each; see docs/design.md):

    accounts          organizations, members, keys, projects, invitations
    balances          one actor per organization: lots, holds, ledger
    generation/jobs   one actor per job: status, hold id, outputs
    engines           engine server pools (health, load), outcomes of engine webhooks
    products/runs     one actor per product run: steps
    topups            one actor per organization: checkout sessions
    tickets           one actor per organization: support tickets
    sessions          browser sessions, provider sign-in flows
    account_webhooks  account-webhook deliveries (the dispatcher reading the events outbox)
    webhook_delivery  one actor: account webhooks, their test sends, their sealed secrets
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import trio

from service.actors.accounts.actor import AccountsActor
from service.actors.balance.actor import BalanceActor
from service.actors.facades import Accounts, Balances, Sessions, Tickets, Webhooks
from service.actors.jobs.actor import JobActor
from service.actors.jobs.facade import Generation
from service.actors.retention import RetentionActor
from service.actors.runs.actor import RunActor
from service.actors.runs.facade import Products
from service.actors.runtime import Registry
from service.actors.sessions import SessionsActor
from service.actors.tickets import TicketsActor
from service.backends import BACKENDS
from service.backends import runnable as builtin_runnable
from service.catalog.catalog import Catalog, CatalogError, Model, load_catalog
from service.catalog.engines import missing_tokens
from service.engines import Engines
from service.engines.table import backends as engine_backends
from service.engines.table import tables as engine_tables
from service.clock import Clock
from service.console import Console
from service.assets.signing import load_secret
from service.config import Settings
from service.net.client import Sender
from service.net.oidc import OidcProvider, configured
from service.payments.actor import TopupActor
from service.payments.actor import recover as recover_topups
from service.payments.base import PaymentProvider
from service.payments.choose import provider_for
from service.payments.pricing import Quote, quote_from
from service.storage import billing as billing_sql
from service.storage import retention as retention_sql
from service.storage.db import Store
from service.limits import KeyBuckets
from service.mail.outbox import MailOutbox
from service.senders.account_webhooks import AccountWebhooks
from service.metrics import Metrics
from service.sealing import NodeKey
from service.streams import Hub
from service.throttle import Throttle


R = TypeVar("R", bound=Registry[Any])


class Node:
    """The parts of a running node. Every attribute is set by `build`, in this order."""

    settings: Settings
    store: Store
    clock: Clock
    node_key: NodeKey  # seals the stored secrets the node must read back (webhook secrets)
    sender: Sender  # outgoing HTTP (SSRF guard, CA file), shared by every outgoing call
    catalog: Catalog
    engines: Engines  # the catalog's engine models: server pools, health checks, engine webhooks
    streams: Hub  # committed job and run changes to open event streams, in memory
    key_buckets: KeyBuckets  # the request rate limit per API key
    metrics: Metrics  # Prometheus counters of this node (GET /metrics)
    accounts: Accounts
    balances: Balances
    generation: Generation
    jobs: Registry[JobActor]
    products: Products
    runs: Registry[RunActor]
    topup_quote: Quote
    payments: PaymentProvider | None  # None: no payment provider configured
    topups: Registry[Any]
    account_webhooks: AccountWebhooks  # the events outbox's dispatcher: fan-out, fair shares, signed POSTs
    webhook_delivery: Webhooks
    tickets: Tickets
    retention: Registry[Any]  # one actor: deletes finished rows past their age, in small batches
    sessions: Sessions  # browser sessions and provider sign-in flows
    page_secret: bytes  # signs the pages' CSRF tokens, derives PKCE verifiers
    login_by_address: Throttle
    login_by_account: Throttle
    oidc: dict[str, OidcProvider]  # identity providers by their key
    mail: MailOutbox  # the mail outbox's dispatcher (SMTP, or the log without a host)
    console: Console  # the operator console's sessions, audit log and last catalog reload
    hook_gate: Any = None  # the hook gate (service/hookgate/) when it runs: set by `genservice serve`

    def __init__(self, settings: Settings, store: Store, clock: Clock) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.registries: list[Registry[Any]] = []
        # steps run once every registry is up, before HTTP: resume work left by a restart
        self.recoveries: list[Callable[[], Awaitable[None]]] = []
        # run after HTTP has drained, before the actors stop
        self.closers: list[Callable[[], Awaitable[None]]] = []

    async def start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.store.run)
        await nursery.start(self.streams.run)
        await nursery.start(self.engines.run)
        for registry in self.registries:
            await nursery.start(registry.run)
        for recover in self.recoveries:
            await recover()

    def runnable(self, model: Model) -> bool:
        """Whether a model can take jobs here now: a built-in whose backend is present, or an
        engine model whose pool is not all known down."""
        return self.engines.available(model) if model.engine is not None else builtin_runnable(model.backend)

    async def aclose(self) -> None:
        for close in self.closers:
            await close()

    def _registry(self, registry: R) -> R:
        self.registries.append(registry)
        return registry


def _start_retention(node: Node) -> Callable[[], Awaitable[None]]:
    async def start() -> None:
        node.retention.get("retention")  # its first sweep runs at once, then every hour

    return start


def read_catalog(path: str | None) -> Catalog:
    """The catalog file read with the engines this node drives (`service/engines/table.py`),
    through every start-up check."""
    return check_catalog(load_catalog(path, engine_tables()))


def check_catalog(catalog: Catalog) -> Catalog:
    """The start-up checks the catalog file alone cannot make: every backend is known
    here, and every engine token variable is set. One line per problem; any stops the start."""
    known = [*BACKENDS, *engine_backends()]
    problems = [f"model {m.id!r}: backend: unknown backend {m.backend!r} (known: {', '.join(known)})"
                for m in catalog.models if m.backend not in known]
    problems += missing_tokens(catalog.models)
    if problems:
        raise CatalogError(f"{catalog.source}: " + f"\n{catalog.source}: ".join(problems))
    return catalog


def build(settings: Settings, store: Store, clock: Clock, node_key: NodeKey | None = None) -> Node:
    """Assemble the node, part by part, in dependency order."""
    node = Node(settings, store, clock)
    node.node_key = node_key or NodeKey(settings.node_key_path)
    node.sender = Sender(allow_private=settings.webhook_allow_private, ca_file=settings.webhook_ca_file)
    node.closers.append(node.sender.aclose)
    node.catalog = read_catalog(settings.catalog_file)
    node.streams = Hub(clock)
    node.key_buckets = KeyBuckets(settings.rate_limit_per_key, settings.rate_limit_burst)
    node.metrics = Metrics(backlog=lambda: retention_sql.backlog(store), open_streams=lambda: node.streams.open_streams,
                           engine_queues=lambda: node.generation.queues.all())

    node.mail = MailOutbox(store, clock, settings, node.node_key)
    # started with the registries (it has their `run`), woken by the writes that queue mail
    node.registries.append(node.mail)  # type: ignore[arg-type]
    node.recoveries.append(node.mail.recover)  # mails in flight at the last stop, then sending starts
    node.accounts = node._registry(Accounts("accounts", lambda key: AccountsActor(store, clock, node.mail), clock))
    node.balances = node._registry(Balances("balances", lambda org_id: BalanceActor(node, org_id), clock))

    async def wake_balances() -> None:
        """Actors of organizations with live credits, so lot expiries and outstanding holds
        are in memory with their deadlines."""
        for org_id in billing_sql.org_ids_with_live_credits(store):
            node.balances.get(org_id)

    node.recoveries.append(wake_balances)

    node.generation = Generation(node)  # jobs, per-model slots, job webhooks, asset files
    node.engines = Engines(node.catalog, lambda: settings.public_base_url,
                           load_secret(settings.data_dir, "engine-hook-secret"), node.generation.engine_progress,
                           hook_base=lambda: settings.engine_hooks_url,
                           allow_private=settings.webhook_allow_private)  # output URLs too: docs/engines.md
    node.closers.append(node.engines.aclose)
    node.jobs = node._registry(node.generation.jobs)
    node.registries.append(node.generation.webhooks)  # type: ignore[arg-type]  # the job-webhook outbox
    node._registry(node.generation.uploads)
    node.recoveries.append(node.generation.recover)

    node.products = Products(node)  # product runs; resumed after the jobs they wait on
    node.runs = node._registry(node.products.runs)
    node.recoveries.append(node.products.recover)

    node.topup_quote = quote_from(settings.usd_per_credit, settings.currency)  # a bad price stops the start
    node.payments = provider_for(settings)
    node.topups = node._registry(Registry("topups", lambda key: TopupActor(node), clock))
    node.recoveries.append(lambda: recover_topups(node))  # paid top-ups whose lot was not granted
    if node.payments is not None:
        node.closers.append(node.payments.aclose)

    # account webhooks: the events outbox, woken by the store after a commit that wrote an event
    node.account_webhooks = AccountWebhooks(store, clock, lambda: node.sender, node.node_key.open)
    node.registries.append(node.account_webhooks)  # type: ignore[arg-type]
    node.recoveries.append(node.account_webhooks.recover)  # deliveries in flight at the last stop
    node.webhook_delivery = node._registry(Webhooks(node))  # webhook settings and test sends

    node.tickets = node._registry(Tickets("tickets", lambda key: TicketsActor(store, clock), clock))

    node.retention = node._registry(
        Registry("retention", lambda key: RetentionActor(store, clock, settings.retention_days), clock))
    node.recoveries.append(_start_retention(node))

    # people: browser sessions, login throttles, identity providers
    node.sessions = node._registry(Sessions("sessions", lambda key: SessionsActor(store, clock, settings.public_base_url), clock))
    node.page_secret = load_secret(settings.data_dir, "page-secret")
    node.login_by_address = Throttle(clock, burst=settings.login_attempts_per_address, every=6.0)  # then 10 a minute
    node.login_by_account = Throttle(clock, burst=5, every=60.0)   # 5 at once, then 1 a minute
    oidc_http = httpx.AsyncClient(follow_redirects=False)
    node.closers.append(oidc_http.aclose)
    node.oidc = {p.key: OidcProvider(p, clock, oidc_http) for p in configured(settings)}
    node.console = Console(store, clock, settings.operator_emails)
    return node
