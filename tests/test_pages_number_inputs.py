"""A product's number input typed into the run form: anything that is not a plain finite
number is the input's own 422 message on the form page, never a 500 (a huge integer made
the facade's finiteness check overflow; unicode digits were read as numbers)."""

from __future__ import annotations

import json

import pytest

from tests.pages import csrf, page
from tests.test_dashboard_http import logged_in

pytestmark = pytest.mark.usefixtures("cheap_hashes")

NOT_NUMBERS = ["²", "٣", "1" * 400, "9" * 5000, "-" + "1" * 400, "nan", "inf", "-inf", "1e999", "1_0", "-", "0x10"]


@pytest.mark.parametrize("raw", NOT_NUMBERS, ids=range(len(NOT_NUMBERS)))
async def test_a_seed_that_is_not_a_plain_finite_number_is_the_inputs_422(node, raw):
    await logged_in(node)
    _, html = await page(node.client, "/products/text-to-clip")
    r = await node.client.post("/products/text-to-clip/runs",
                               form={"csrf_token": csrf(html), "in_prompt": "a fox", "in_seed": raw})
    body = await r.get_data(as_text=True)
    assert r.status_code == 422, body[:300]
    assert "seed must be a number." in body
    assert node.store.scalar("SELECT count(*) FROM product_runs") == 0


@pytest.mark.parametrize("raw, seed", [("7", 7), ("-3", -3), ("2.5", 2.5), (" 12 ", 12), ("1e3", 1000.0)])
async def test_a_plain_number_is_taken(node, raw, seed):
    await logged_in(node)
    _, html = await page(node.client, "/products/text-to-clip")
    r = await node.client.post("/products/text-to-clip/runs",
                               form={"csrf_token": csrf(html), "in_prompt": "a fox", "in_seed": raw})
    assert r.status_code == 303 and r.headers["Location"].startswith("/products/runs/")
    run_id = r.headers["Location"].rsplit("/", 1)[1]
    inputs = json.loads(node.store.scalar("SELECT inputs FROM product_runs WHERE id = ?", (run_id,)))
    assert inputs["seed"] == seed and type(inputs["seed"]) is type(seed)
