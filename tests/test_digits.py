"""Whole numbers from text a client wrote: ASCII digits only, capped before `int`."""
import pytest

from service.digits import ascii_int


@pytest.mark.parametrize("text, cap, value", [
    ("0", 10, 0), ("007", 10, 7), ("10", 10, 10), ("11", 10, 10), ("9" * 5000, 60, 60),
    (b"42", 100, 42), (b"9" * 5000, 2**63 - 1, 2**63 - 1), ("0" * 5000 + "5", 10, 5),
    ("", 10, None), ("²", 10, None), ("1²", 10, None), ("٣", 10, None), ("-1", 10, None),
    ("+1", 10, None), (" 1", 10, None), ("1.0", 10, None), ("1e3", 10, None), (b"", 10, None),
])
def test_ascii_digits_only_and_capped(text, cap, value):
    assert ascii_int(text, cap) == value


def test_comfyui_outputs_are_ordered_by_node_number_other_ids_last():
    """ComfyUI's history keys outputs by the workflow's node ids, which the operator's
    workflow file chose: an id such as `²` was a ValueError in every job of that model."""
    from service.engines.comfyui import _node_order
    assert sorted(["10", "²", "9", "b", "a"], key=_node_order) == ["9", "10", "a", "b", "²"]
