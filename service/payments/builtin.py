"""The built-in test provider: the checkout is a page of this node
(`{base_url}/checkout/test/<topup_id>`), and `POST /operator/v1/topups/{id}/pay` is the
provider's confirmation. Nothing leaves the process."""

from __future__ import annotations

from service.payments.base import Checkout, PaymentProvider, TopupDraft

CHECKOUT_PATH = "/checkout/test/"


class TestProvider(PaymentProvider):
    __test__ = False  # not a pytest class
    name = "test"

    def __init__(self, base_url: str) -> None:
        super().__init__()
        self.base_url = base_url.rstrip("/")

    async def _create_checkout(self, topup: TopupDraft) -> Checkout:
        return Checkout(f"{self.base_url}{CHECKOUT_PATH}{topup.id}", f"test_{topup.id}")
