"""The node's running parts, handed to the HTTP layer: settings, clock, store, registries.

Each feature adds its registry here and, if it has work to resume after a restart, a
`recover` step that `start` runs once every registry is up.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Awaitable, Callable

import trio

from service import features
from service.actors.accounts import AccountsActor
from service.actors.runtime import Registry
from service.clock import Clock
from service.config import Settings
from service.storage.db import Store


class Services:
    def __init__(self, settings: Settings, store: Store, clock: Clock) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.accounts: Registry = Registry("accounts", lambda key: AccountsActor(store, clock), clock)
        self.registries: list[Registry] = [self.accounts]
        self.recoveries: list[Callable[[], Awaitable[None]]] = []
        self.approval_hooks: list[Callable[[str], Awaitable[None]]] = []
        self.closers: list[Callable[[], Awaitable[None]]] = []

    async def start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.store.run)
        for registry in self.registries:
            await nursery.start(registry.run)
        for recover in self.recoveries:
            await recover()

    async def on_approved(self, org_id: str) -> None:
        """An organization was created approved or approved later (signup lot, once)."""
        for hook in self.approval_hooks:
            await hook(org_id)

    async def aclose(self) -> None:
        for close in self.closers:
            await close()


def build(settings: Settings, store: Store, clock: Clock) -> Services:
    """Assemble the node: every module of `service.features` attaches itself, in name order."""
    services = Services(settings, store, clock)
    for name in sorted(m.name for m in pkgutil.iter_modules(features.__path__)):
        importlib.import_module(f"service.features.{name}").attach(services)
    return services
