"""Operator routes of top-ups (operations.md):

- `POST /operator/v1/topups/{id}/pay`: the payment provider's confirmation, as the test
  provider would send it: 200 `{data: topup}`, the `topup` lot added once (a repeat or a
  concurrent call returns the paid top-up and adds nothing); 404 for an unknown id; 409
  for an expired top-up. Available outside test mode too (an operator can confirm a
  payment received some other way).
- `POST /operator/v1/test/payment-provider` `{"fail_checkout": bool}` (test mode only;
  404 otherwise, before the token is checked): while on, checkouts fail to start.
  Answers `{data: {provider, fail_checkout}}`.
"""

from __future__ import annotations

from functools import wraps

from quart import Blueprint

from service.errors import NotFound
from service.http.auth import node
from service.http.routes.operator import operator
from service.http.routes.topups import ROUTE_MISSING, topup_view
from service.http.schemas import Body, body
from service.payments import facade

bp = Blueprint("operator_topups", __name__)


def test_only(func):
    @wraps(func)
    async def wrapper(*args, **kwargs):
        if not node().settings.test_mode:
            raise NotFound(ROUTE_MISSING)
        return await func(*args, **kwargs)

    return wrapper


class ProviderSwitch(Body):
    fail_checkout: bool


@bp.post("/operator/v1/topups/<topup_id>/pay")
@operator
async def pay(topup_id: str):
    return {"data": topup_view(await facade.confirm_topup(node(), topup_id))}


@bp.post("/operator/v1/test/payment-provider")
@test_only
@operator
@body(ProviderSwitch)
async def payment_provider(data: ProviderSwitch):
    provider = node().payments
    if provider is None:
        raise NotFound(ROUTE_MISSING)
    provider.fail_checkout = data.fail_checkout
    return {"data": {"provider": provider.name, "fail_checkout": provider.fail_checkout}}
