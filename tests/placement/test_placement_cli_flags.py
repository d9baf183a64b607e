"""`moeserve place` / `moeserve trace` misuse: one line on stderr naming the flag, status 2, before any
file is read or written (docs/placement.md)."""
from __future__ import annotations

from pathlib import Path

import pytest

from moeserve.cli import main

REPO = Path(__file__).resolve().parents[2]
TRACE = str(REPO / "traces" / "builtin_model.npz")  # 4 layers x 16 experts


def _refused(capsys, argv: list[str], needle: str) -> None:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err


@pytest.mark.parametrize("flags, needle", [
    (["--ep", "0"], "--ep 0 is out of range"),  # was "--ep is required"
    (["--ep", "-2"], "--ep -2 is out of range"),  # was "-2 ranks do not split evenly over 1 nodes"
    (["--ep", "2", "--nodes", "0"], "--nodes 0 is out of range"),
    (["--ep", "2", "--nodes", "3"], "--ep 2 ranks do not split evenly over --nodes 3"),
    (["--ep", "2", "--redundant", "-1"], "--redundant -1 is out of range"),
    (["--ep", "2", "--home-share", "nan"], "--home-share nan is out of range"),
    (["--ep", "2", "--home-share", "1.5"], "--home-share 1.5 is out of range"),
    (["--eval", ""], "--eval ''"),  # was planning, then "--ep is required"
    (["--ep", "2", "--current", ""], "--current ''"),  # was ignored
])
def test_place_flags_out_of_range_are_named(capsys, flags, needle):
    _refused(capsys, ["place", "--trace", TRACE, *flags], needle)


def test_place_eval_with_output_is_refused_not_ignored(tmp_path, capsys):
    plan = str(tmp_path / "plan.json")
    assert main(["place", "--trace", TRACE, "--ep", "2", "-o", plan]) == 0
    capsys.readouterr()
    _refused(capsys, ["place", "--trace", TRACE, "--eval", plan, "-o", str(tmp_path / "new.json")], "--eval")
    assert not (tmp_path / "new.json").exists()


def test_place_eval_refuses_planning_flags_and_counts_the_plan_contradicts(tmp_path, capsys):
    """--eval scores the plan as it is: --redundant, --home-share and --merge shaped nothing, and an --ep or
    --nodes other than the plan's was ignored without a word."""
    plan = str(tmp_path / "plan.json")
    assert main(["place", "--trace", TRACE, "--ep", "4", "--nodes", "2", "-o", plan]) == 0
    capsys.readouterr()
    scored = ["place", "--trace", TRACE, "--eval", plan]
    _refused(capsys, [*scored, "--redundant", "2"], "--redundant")
    _refused(capsys, [*scored, "--merge"], "--merge")
    _refused(capsys, [*scored, "--ep", "2"], "--ep 2, but the plan")
    _refused(capsys, [*scored, "--nodes", "4", "--ep", "4"], "--nodes 4, but the plan")
    assert main([*scored, "--ep", "4", "--nodes", "2"]) == 0 and main(scored) == 0


@pytest.mark.parametrize("flag, name, needle", [
    ("-o", "", "-o/--output ''"),  # was: planned, printed, wrote nothing, status 0
    ("-o", "DIR", "not a directory"),
    ("--plot", "", "--plot ''"),  # was ignored
    ("--plot", "DIR", "not a directory"),  # was: wrote DIR.png, status 0
    ("--plot", "loads.txt", "name a figure file ending in"),  # was matplotlib's message, after writing -o
    ("--plot", "missing/loads.png", "no such directory"),  # was: after writing -o
])
def test_place_refuses_an_output_it_cannot_write_before_writing_any(tmp_path, capsys, flag, name, needle):
    (tmp_path / "DIR").mkdir()
    plan = tmp_path / "plan.json"
    other = ["--plot", str(tmp_path / "ok.png")] if flag == "-o" else ["-o", str(plan)]
    _refused(capsys, ["place", "--trace", TRACE, "--ep", "2", flag, str(tmp_path / name) if name else "", *other], needle)
    assert not plan.exists() and not (tmp_path / "ok.png").exists() and not (tmp_path / "DIR.png").exists()


@pytest.mark.parametrize("argv, needle", [
    (["show", TRACE, "--heatmap", "heat.txt"], "--heatmap"),  # was a ValueError traceback from matplotlib
    (["show", TRACE, "--heatmap", "DIR"], "not a directory"),  # was: wrote DIR.png, reported DIR
    (["show", TRACE, "--heatmap", ""], "--heatmap ''"),  # was ignored
    (["convert", TRACE, "-o", ""], "-o/--output ''"),
    (["convert", TRACE, "-o", "DIR"], "not a directory"),
])
def test_trace_refuses_an_output_it_cannot_write(tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "DIR").mkdir()
    _refused(capsys, ["trace", *argv], needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DIR"]


def test_figures_are_written_where_named(tmp_path, capsys):
    heat, plot = tmp_path / "heat.svg", tmp_path / "loads.PNG"
    assert main(["trace", "show", TRACE, "--heatmap", str(heat)]) == 0
    assert main(["place", "--trace", TRACE, "--ep", "2", "--plot", str(plot)]) == 0
    assert heat.stat().st_size > 0 and plot.stat().st_size > 0
