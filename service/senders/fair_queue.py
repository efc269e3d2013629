"""The fair send queue of account webhooks (service/senders/account_webhooks.py): round-robin
over organizations, then over an organization's webhooks, within per-webhook,
per-organization and node-wide caps. Plain memory, no task; the source calls it from the
trio thread only."""

from __future__ import annotations

from collections import deque


class FairQueue:
    """Queued deliveries per organization and webhook, handed out fairly within the caps.

    `take(limit)` returns items to start now; `done(item_id)` frees the item's slots. Unknown
    ids are ignored (a test send, or a send started before an in-place restart)."""

    def __init__(self, total: int, per_org: int, per_webhook: int) -> None:
        self.total, self.per_org, self.per_webhook = total, per_org, per_webhook
        self.queues: dict[str, dict[str, deque]] = {}   # org -> webhook -> items
        self.org_rr: deque[str] = deque()               # orgs with queued items
        self.hook_rr: dict[str, deque[str]] = {}        # org -> webhooks with queued items
        self.org_busy: dict[str, int] = {}
        self.hook_busy: dict[str, int] = {}
        self.in_flight: dict[str, tuple[str, str]] = {}  # item id -> (org, webhook)
        self.queued = 0

    def push(self, org: str, hook: str, item_id: str) -> None:
        hooks = self.queues.get(org)
        if hooks is None:
            hooks = self.queues[org] = {}
            self.hook_rr[org] = deque()
            self.org_rr.append(org)
        q = hooks.get(hook)
        if q is None:
            q = hooks[hook] = deque()
            self.hook_rr[org].append(hook)
        q.append(item_id)
        self.queued += 1

    def _take_from(self, org: str) -> str | None:
        if self.org_busy.get(org, 0) >= self.per_org:
            return None
        rr = self.hook_rr[org]
        for _ in range(len(rr)):
            hook = rr[0]
            rr.rotate(-1)
            if self.hook_busy.get(hook, 0) >= self.per_webhook:
                continue
            q = self.queues[org][hook]
            item = q.popleft()
            if not q:
                del self.queues[org][hook]
                rr.remove(hook)
            self.queued -= 1
            self.org_busy[org] = self.org_busy.get(org, 0) + 1
            self.hook_busy[hook] = self.hook_busy.get(hook, 0) + 1
            self.in_flight[item] = (org, hook)
            return item
        return None

    def take(self, limit: int | None = None) -> list[str]:
        out: list[str] = []
        progress = True
        cap = self.total if limit is None else min(self.total, len(self.in_flight) + limit)
        while progress and self.org_rr and len(self.in_flight) < cap:
            progress = False
            for _ in range(len(self.org_rr)):
                if len(self.in_flight) >= cap:
                    break
                org = self.org_rr[0]
                self.org_rr.rotate(-1)
                item = self._take_from(org)
                if item is None:
                    continue
                out.append(item)
                progress = True
                if not self.queues[org]:
                    del self.queues[org], self.hook_rr[org]
                    self.org_rr.remove(org)
        return out

    def waiting(self) -> dict[str, int]:
        """Per webhook, its items queued or in flight (the caller caps this)."""
        counts = dict(self.hook_busy)
        for hooks in self.queues.values():
            for hook, q in hooks.items():
                counts[hook] = counts.get(hook, 0) + len(q)
        return counts

    def done(self, item_id: str) -> None:
        where = self.in_flight.pop(item_id, None)
        if where is None:
            return
        org, hook = where
        for counts, k in ((self.org_busy, org), (self.hook_busy, hook)):
            n = counts[k] - 1
            if n:
                counts[k] = n
            else:
                del counts[k]
