"""The sample trace the README's placement commands use (traces/builtin_model.npz, recorded from the
built-in model by traces/make_samples.py) loads with `moeserve trace show` and is skewed: under the
contiguous placement the busiest rank carries far more than the mean, and the optimizer can fix that."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from moeserve.cli import main
from moeserve.placement.evaluate import score
from moeserve.placement.plan import PlacementPlan
from moeserve.placement.importers import load_trace

TRACE = Path(__file__).resolve().parents[2] / "traces" / "builtin_model.npz"


def test_trace_show_loads_it(capsys):
    assert main(["trace", "show", str(TRACE), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == "moeserve-tiny-moe"
    assert (summary["layers"], summary["experts"], summary["top_k"]) == (4, 16, 2)
    assert summary["windows"] >= 2
    assert summary["max_over_mean"]["mean"] >= 2.0  # a uniform router would give about 1


@pytest.mark.parametrize("ranks, at_most", [(4, 0.8), (16, 0.5)])
def test_contiguous_placement_is_unbalanced(ranks, at_most):
    trace = load_trace(str(TRACE))
    loads = trace.loads
    assert loads.shape == (4, 16) and np.all(loads.sum(axis=1) > 0)
    b = score(PlacementPlan.contiguous(4, 16, ranks), loads).balancedness
    assert b.mean() <= at_most, b


def test_the_optimizer_improves_it(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert main(["place", "--trace", str(TRACE), "--ep", "4", "--redundant", "4", "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["place", "--eval", str(plan), "--trace", str(TRACE), "--json"]) == 0
    placed = json.loads(capsys.readouterr().out)["traces"]["builtin_model"]["balancedness_mean"]
    contiguous = score(PlacementPlan.contiguous(4, 16, 4), load_trace(str(TRACE)).loads).balancedness.mean()
    assert placed > contiguous + 0.1 and placed >= 0.9
