"""Messages of the balance actor (one actor per organization, registry `node.balances`,
key = organization id). Every message that moves money carries an id and is idempotent on
it, because an ask can time out after the actor committed. Amounts are integer
micro-credits; times are service-time floats (seconds since the epoch).

Replies:
- PlaceHold -> dict[str, Any] hold row (id, job_id, workflow_run_id, project_id, status, amount_uc, ...);
  raises InsufficientCredits(details required/available as 2-place strings) and creates
  nothing when `amount_uc` > available. Repeating a hold_id returns the original hold.
- Capture -> dict[str, Any] hold row, status captured. `amount_uc` None = the held amount; less than
  held returns the remainder; more than held is refused. Capturing twice charges once.
- Release -> dict[str, Any] hold row, status released. Releasing twice settles once. Capture of a
  released hold or release of a captured one raises Conflict.
- Capture and Release may carry `also`, the caller's writes that go with the settlement: they
  run in the same transaction as the batch's rows when the message is not refused (a repeat
  included), so a normal reply means they are committed; a refusal or `Unavailable` means
  they are not.
- Grant -> dict[str, Any] lot row (id, source, amount, remaining, expires_at, reason, created_at);
  repeating a grant_id returns the original lot (a top-up paid twice adds one lot).
- LimitPut -> {scope, id, limit, spent} (decimal strings; re-arms the limit's warning).
- SpendCheck -> None when the balance, the key's and the project's limits all cover the
  amount; raises InsufficientCredits or SpendLimitReached (in that order) and holds nothing.
- PlaceHold also refuses with SpendLimitReached (details scope, limit, spent, required)
  when the key's or the project's spend limit would be passed, after the balance.
- SettingsPut -> dict[str, Any] settings (re-arms the low-balance warning and checks at once).
- Snapshot -> dict[str, Any] of the actor's memory (tests and the benchmark compare it to the DB).
- Sync -> {available_uc, held_uc} once every message before it and every due lot expiry is
  committed (the ledger route and the test clock use it).
- Stop -> None; the actor stops once its mailbox is empty and the next message spawns a
  fresh one loaded from SQLite (tests and the benchmark use it as a restart).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PlaceHold:
    hold_id: str
    amount_uc: int
    job_id: str | None = None
    workflow_run_id: str | None = None
    project_id: str | None = None
    description: str | None = None
    api_key_id: str | None = None


@dataclass(frozen=True)
class LimitPut:
    """Set a project's monthly (`scope` "project") or an API key's lifetime ("api_key")
    spend limit; None removes it."""

    scope: str
    scope_id: str
    limit_uc: int | None


@dataclass(frozen=True)
class SpendCheck:
    """Would the balance and the limits cover `amount_uc` now? (a product run's start)"""

    amount_uc: int
    project_id: str | None = None
    api_key_id: str | None = None


@dataclass(frozen=True)
class Capture:
    hold_id: str
    amount_uc: int | None = None
    # the caller's own rows that go with the settlement (a job's `hold_settled`): run in the
    # batch's transaction when the capture is not refused, so both commit or neither does
    also: Callable[[Any], None] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Release:
    hold_id: str
    also: Callable[[Any], None] | None = field(default=None, compare=False)  # as Capture.also


@dataclass(frozen=True)
class Grant:
    grant_id: str
    amount_uc: int
    source: str = "promo"
    expires_at: float | None = None
    reason: str | None = None


@dataclass(frozen=True)
class SettingsPut:
    low_balance_threshold_uc: int | None


@dataclass(frozen=True)
class Snapshot:
    pass


@dataclass(frozen=True)
class Sync:
    pass


@dataclass(frozen=True)
class Stop:
    pass
