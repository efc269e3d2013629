"""Which request values name one of our assets."""

import pytest

from service.catalog.assets import AssetInfo, find_assets, parse_asset_ref
from service.errors import Unprocessable

ID = "0f8fad5b-d9cb-469f-a165-70867728950e"
BASE = "https://gen.example"


@pytest.mark.parametrize(("value", "base"), [
    (ID, BASE),
    (ID.upper(), BASE),
    (ID, None),
    (f"{BASE}/v1/generation/assets/{ID}/content", BASE),
    (f"{BASE}/v1/generation/assets/{ID}/content", BASE + "/"),
    (f"HTTPS://GEN.example/v1/generation/assets/{ID}/content", BASE),
    (f"{BASE}/files/{ID}?expires=1700000000&sig=abc", BASE),
    (f"{BASE}/files/{ID}", BASE),
    (f"{BASE}/api/files/{ID}?s=1", BASE + "/api"),
    ("http://127.0.0.1:8000/v1/generation/assets/" + ID + "/content", "http://127.0.0.1:8000"),
])
def test_accepted(value, base):
    assert parse_asset_ref(value, base) == ID


@pytest.mark.parametrize(("value", "base"), [
    (f"{BASE}/v1/generation/assets/{ID}/content", None),
    (f"http://gen.example/v1/generation/assets/{ID}/content", BASE),
    (f"https://gen.example:8443/files/{ID}", BASE),
    (f"https://other.example/files/{ID}", BASE),
    (f"{BASE}/v1/generation/assets/{ID}", BASE),
    (f"{BASE}/v1/generation/assets/{ID}/content?x=1", BASE),
    (f"{BASE}/v1/generation/assets/{ID}/content#frag", BASE),
    (f"{BASE}/files/{ID}/extra", BASE),
    (f"{BASE}/files/not-a-uuid", BASE),
    (f"{BASE}/files/{ID}", BASE + "/api"),
    (f"{ID}x", BASE),
    ("", BASE),
    (42, BASE),
])
def test_refused(value, base):
    assert parse_asset_ref(value, base) is None


def test_find_assets_keeps_order_and_dedupes():
    calls = []

    def resolve(ids):
        calls.append(list(ids))
        return {i: AssetInfo(i, "image", "p") for i in ids}

    assert list(find_assets(["b", "a", "b"], resolve, "p")) == ["b", "a"]
    assert calls == [["b", "a"]]
    assert find_assets([], resolve, "p") == {} and len(calls) == 1


def test_find_assets_adds_caller_details():
    with pytest.raises(Unprocessable) as e:
        find_assets(["x"], lambda ids: {}, "p", {"input": "image"})
    assert e.value.details == {"input": "image", "asset_ids": ["x"]}
