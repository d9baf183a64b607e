"""benchmarks/gpu_check.py still runs: its harness at tiny shapes under TRITON_INTERPRET=1 (--dry-run),
and its one-line refusal without CUDA. Its numbers go into docs/kernels.md once a GPU runs it, so a
script that rots must fail here, not on the day a GPU is lent."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")
REPO = Path(__file__).resolve().parents[2]


def gpu_check(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


@pytest.mark.slow
def test_dry_run_times_every_kernel_at_both_models_shapes(tmp_path):
    proc = gpu_check("--dry-run", "--tune", "--out", str(tmp_path / "check.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "check.json").read_text())
    rows = result["kernels"]
    assert {(r["kernel"], r["model"]) for r in rows} == {
        ("fused_moe", "DeepSeek-V3"), ("fused_experts", "DeepSeek-V3"), ("mla_decode", "DeepSeek-V3"),
        ("mla_prefill", "DeepSeek-V3"), ("mla_prefill_expanded", "DeepSeek-V3"), ("rms_norm+residual", "DeepSeek-V3"),
        ("fp8_linear", "DeepSeek-V3"), ("fused_moe fp8", "DeepSeek-V3"),
        ("fused_moe", "Mixtral-8x7B"), ("fused_experts", "Mixtral-8x7B"), ("paged_decode", "Mixtral-8x7B"),
        ("paged_prefill", "Mixtral-8x7B")}  # fmt: skip
    assert all(r["triton_us"] > 0 and r["torch_us"] > 0 and r["roofline_us"] > 0 for r in rows)
    assert {r["torch_op"] for r in rows if r["kernel"] == "fp8_linear"} == {"torch._scaled_mm rowwise + act quant"}
    assert all(list(r["others"]) == ["torch._scaled_grouped_mm rowwise + gather, act, weights, sum"]
               for r in rows if r["kernel"] == "fused_moe fp8")  # fmt: skip
    assert {r["phase"].split(",")[0] for r in rows if r["kernel"] == "fused_moe"} == {"decode", "prefill"}
    assert "| fused_moe | DeepSeek-V3 |" in proc.stdout  # the printed table
    # each kernel with candidate tiles, at its main shape (the fused MoE: prefill shapes only, here)
    assert sorted((t["kernel"], t["model"]) for t in result["tuning"]) == [
        ("fused_moe", "DeepSeek-V3"), ("fused_moe", "Mixtral-8x7B"), ("mla_decode", "DeepSeek-V3"),
        ("mla_prefill_expanded", "DeepSeek-V3"), ("paged_prefill", "Mixtral-8x7B")]  # fmt: skip
    assert all(t["best_us"] <= t["default_us"] for t in result["tuning"])
    assert {r["timing"] for r in rows} == {"cpu"}
    mla = [r["phase"] for r in rows if r["kernel"] == "mla_decode"]
    assert len(mla) == 4 and any("MTP" in p for p in mla)
    assert result["commit"] and result["torch"] == torch.__version__
    # the decode step from the host's side (gpu_runtime.py): every model, mode and concurrency measured
    runtime = result["runtime"]
    assert set(runtime) == {"built-in", "wide-mixtral"}
    assert set(runtime["built-in"]) == {"graphs", "enforce-eager", "graphs, no async scheduling"}
    assert set(runtime["wide-mixtral"]) == {"graphs", "enforce-eager"}
    for modes in runtime.values():
        for mode, figures in modes.items():
            assert "error" not in figures, figures.get("trace")
            assert (figures["graphs"] is None) == (mode == "enforce-eager")
            for c in ("1", "3"):
                assert figures[c]["tpot_ms"] > 0 and figures[c]["decode_steps"] >= 1
    assert "| built-in | graphs | 1 |" in proc.stdout


@pytest.mark.slow
def test_a_spent_time_limit_skips_every_step_and_still_writes_the_json(tmp_path):
    proc = gpu_check("--dry-run", "--time-limit", "0", "--out", str(tmp_path / "check.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "check.json").read_text())
    assert result["kernels"] == "skipped (time limit)" and result["gpu_tests"] == "skipped (dry run)"
    assert result["runtime"] == "skipped (time limit)"


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_without_cuda_it_says_so_in_one_line():
    proc = gpu_check()
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "no CUDA device" in proc.stderr


def test_the_cuda_timer_steps_with_stand_ins_on_the_cpu():
    """gpu_timing.time_replays, the CUDA timer's control flow, with CPU stand-ins for events, capture and
    sync: a captured call is replayed, an uncapturable one launched, each repetition timed between its
    own events after a flush; medians in microseconds."""
    import time

    sys.path.insert(0, str(REPO / "benchmarks"))
    from gpu_timing import time_replays

    class Event:
        def record(self):
            self.t = time.perf_counter()

        def elapsed_time(self, end):  # milliseconds, as CUDA events
            return (end.t - self.t) * 1e3

    class Graph:
        def __init__(self, fn):
            self.replay = fn

    calls, flushes = [], []
    fn = lambda: calls.append(1) or time.sleep(0.002)  # noqa: E731
    timed = time_replays(fn, Graph, Event, lambda: None, lambda: flushes.append(1), reps=5)
    assert timed.how == "graph" and 1500 < timed.us < 50000 and len(calls) == 6 and len(flushes) == 5
    timed = time_replays(fn, lambda f: None, Event, lambda: None, lambda: None, reps=3)
    assert timed.how == "eager" and len(calls) == 10
