"""`moeserve place` and `moeserve trace` end to end through moeserve.cli.main."""
from __future__ import annotations

import json

import numpy as np
from placement_shared import MIXTRAL, needs_shared

from moeserve.cli import main
from moeserve.placement.plan import PlacementPlan
from moeserve.placement.trace import Trace, default_meta, save_trace


def _write_trace(path, seed, layers=3, experts=32):
    rng = np.random.default_rng(seed)
    counts = rng.zipf(2.0, (2, layers, experts)).astype(float)
    save_trace(Trace(counts, default_meta(layers, experts, top_k=4, num_groups=4, name=f"t{seed}")), str(path))
    return str(path)


def test_place_then_eval(tmp_path, capsys):
    a, b = _write_trace(tmp_path / "a.npz", 0), _write_trace(tmp_path / "b.npz", 1)
    plan_path = str(tmp_path / "plan.json")
    assert main(["place", "--trace", a, b, "--ep", "8", "--nodes", "2", "--redundant", "8", "-o", plan_path,
                 "--plot", str(tmp_path / "p.png")]) == 0
    plan = PlacementPlan.load(plan_path)
    assert plan.phy2log.shape == (3, 40) and plan.num_nodes == 2
    assert (tmp_path / "p.png").stat().st_size > 0
    capsys.readouterr()
    assert main(["place", "--eval", plan_path, "--trace", a, "--current", plan_path, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["experts_moved"] == 0
    contiguous = PlacementPlan.contiguous(3, 32, 8, 2)
    contiguous.save(str(tmp_path / "c.json"))
    assert main(["place", "--eval", str(tmp_path / "c.json"), "--trace", a, "--json"]) == 0
    before = json.loads(capsys.readouterr().out)
    assert report["traces"]["t0"]["balancedness_mean"] > before["traces"]["t0"]["balancedness_mean"]


def test_place_with_locality_and_errors(tmp_path, capsys):
    a = _write_trace(tmp_path / "a.npz", 2)
    out = str(tmp_path / "plan.json")
    assert main(["place", "--trace", a, "--ep", "8", "--nodes", "4", "--redundant", "8", "--home-share", "1",
                 "-o", out, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["traces"]["t2"]["group_home_share_min"] == 1.0
    assert main(["place", "--trace", a, "--ep", "8", "--redundant", "3", "-o", out]) == 2
    assert "multiple of --ep" in capsys.readouterr().err
    assert main(["place", "--trace", a, "--ep", "8", "--policy", "nope"]) == 2
    assert "valid: robust, eplb" in capsys.readouterr().err
    other = _write_trace(tmp_path / "b.npz", 3, layers=2)
    assert main(["place", "--eval", out, "--trace", other]) == 2
    assert "plan is [layers=3" in capsys.readouterr().err


def test_merge_plans_for_the_summed_counts(tmp_path, capsys):
    a, b = _write_trace(tmp_path / "a.npz", 4), _write_trace(tmp_path / "b.npz", 5)
    out = str(tmp_path / "m.json")
    assert main(["place", "--trace", a, b, "--ep", "4", "--redundant", "4", "--merge", "-o", out, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["traces"]["t4+t5"]["balancedness_mean"] > 0.9


@needs_shared
def test_trace_show_and_convert_shared_file(tmp_path, capsys):
    src = str(MIXTRAL / "routing_raw.jsonl")
    assert main(["trace", "show", src, "--heatmap", str(tmp_path / "h.png"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.split("\nheatmap:")[0])
    assert summary["layers"] == 32 and summary["top_k"] == 2 and len(summary["per_layer"][0]["hottest"]) == 3
    out = str(tmp_path / "m.npz")
    assert main(["trace", "convert", src, "-o", out, "--max-tokens", "100"]) == 0
    assert main(["place", "--trace", out, "--ep", "4", "--redundant", "4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert report["traces"]["routing_raw"]["gpus_per_token"] < 2.0
