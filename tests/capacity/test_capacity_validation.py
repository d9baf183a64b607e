"""The published deployments of docs/capacity.md: the package's one set of efficiency factors must
keep every prediction within 15% of what its source reports."""
from __future__ import annotations

import pytest

from moeserve.capacity.efficiency import DEFAULT, Efficiency
from moeserve.capacity.validation import CASES, predict_case

BAND = 0.15


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_within_15_percent_of_published(case):
    predicted = predict_case(case)
    assert abs(predicted / case.published - 1) <= BAND, (
        f"{case.name}: predicted {predicted:.0f} {case.unit}, published {case.published:.0f}")


def test_the_band_can_fail():
    """Halving GEMM efficiency moves some prediction out of the band: the check has teeth."""
    slow = Efficiency(**{**vars(DEFAULT), "gemm": DEFAULT.gemm / 2})
    assert any(abs(predict_case(c, slow) / c.published - 1) > BAND for c in CASES)


def test_every_case_states_its_source_and_assumptions():
    for case in CASES:
        assert case.source and len(case.assumed) > 20
