import pytest

from service.money import fmt, to_uc


def test_round_trip_two_places():
    assert to_uc("200") == 200_000_000
    assert to_uc("0.05") == 50_000
    assert fmt(to_uc("12.3")) == "12.30"
    assert fmt(-50_000) == "-0.05"
    assert fmt(None) is None


@pytest.mark.parametrize("bad", ["0.001", "abc", "NaN", "Infinity", 1.5, True])
def test_rejects(bad):
    with pytest.raises(ValueError):
        to_uc(bad)
