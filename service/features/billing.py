"""Credits: the balance registry (one actor per organization), the signup lot on approval,
and the start-up step that wakes the actors of organizations with live credits (so lot
expiries and outstanding holds are in memory with their deadlines)."""

from __future__ import annotations

from service.actors.balance import SIGNUP_DAYS, SIGNUP_UC, BalanceActor
from service.actors.billing_messages import Grant
from service.actors.runtime import Registry
from service.storage import billing as sql


def attach(services) -> None:
    services.balances = Registry("balances", lambda org_id: BalanceActor(services, org_id), services.clock)
    services.registries.append(services.balances)

    async def grant_signup(org_id: str) -> None:
        """The 200-credit signup lot, once per organization (idempotent on its grant id)."""
        expires = services.clock.now() + SIGNUP_DAYS * 86400
        await services.balances.ask(org_id, Grant(grant_id=f"signup:{org_id}", amount_uc=SIGNUP_UC,
                                                  source="signup", expires_at=expires,
                                                  reason="Signup credit"))

    async def wake_balances() -> None:
        for org_id in sql.org_ids_with_live_credits(services.store):
            services.balances.get(org_id)

    services.approval_hooks.append(grant_signup)
    services.recoveries.append(wake_balances)
