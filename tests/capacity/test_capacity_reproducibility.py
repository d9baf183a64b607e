"""The spread of published figures of one setup (capacity/reproducibility.py), by hand and in the docs."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from moeserve.capacity import reproducibility
from moeserve.capacity.validation import CASES


def test_unreachable_ratio_by_hand():
    # one figure p within 15% of a and of c = 1.35 a: p <= 1.15 a and p >= 0.85 c, so c / a <= 1.15 / 0.85
    assert reproducibility.unreachable_ratio(0.15) == pytest.approx(1.15 / 0.85)
    assert reproducibility.unreachable_ratio(0.25) == pytest.approx(5 / 3)


def test_groups_are_cases_of_one_setup_and_count_by_hand():
    base = CASES[0]
    a = replace(base, name="a", published=100.0, source="one")
    b = replace(base, name="b", published=140.0, source="two", assumed="another reading of the same run")
    c = replace(base, name="c", published=100.0, workload=replace(base.workload, osl=base.workload.osl + 1))
    same = replace(base, name="d", published=100.0, source="three")  # a's figure again: no spread to count
    groups = reproducibility.same_setup_groups([a, b, c])
    assert groups == [(a, b)]  # c's workload differs: not the same setup
    s = reproducibility.spread([a, b, c])
    assert (s.groups, s.median_ratio, s.over_15, s.no_figure_within_15, s.no_figure_within_25) == (1, 1.4, 1, 1, 0)
    assert reproducibility.same_setup_groups([a, same]) == []
    assert reproducibility.spread([a, same]).groups == 0


def test_docs_report_the_spread():
    text = (Path(__file__).resolve().parents[2] / "docs" / "capacity.md").read_text()
    m = re.search(r"(\d+) groups of cases share everything the model reads.*?is ([\d.]+) at the\s+median and "
                  r"([\d.]+) at most; (\d+) groups differ by more than 15%, and in (\d+) of them no single figure "
                  r"is within 15% of\s+both .*?, in (\d+) not within 25%", text, re.S)
    assert m, "docs/capacity.md lost the reproducibility paragraph"
    s = reproducibility.spread()
    assert int(m.group(1)) == s.groups
    assert (m.group(2), m.group(3)) == (f"{s.median_ratio:.2f}", f"{s.largest_ratio:.2f}")
    assert [int(m.group(i)) for i in (4, 5, 6)] == [s.over_15, s.no_figure_within_15, s.no_figure_within_25]
