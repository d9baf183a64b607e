"""The step-time model on hand-worked rooflines, and the purity of the library (no torch)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from moeserve.capacity.efficiency import Efficiency
from moeserve.capacity.hardware import known_profiles, load_hardware
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.model_spec import load_model
from moeserve.capacity.step_time import StepInput, StepModel

IDEAL = Efficiency(gemm=1.0, attention=1.0, weight_stream=1.0, kv_stream=1.0, network=1.0, overlap=1.0)


def test_gemm_roofline_by_hand():
    m, h100 = load_model("deepseek-v3"), load_hardware("h100")
    sm = StepModel(m, h100, Layout(), Precision(weights="fp8", activations="bf16"), IDEAL)
    # 64 rows x 1e9 weights (a 128-row tile): 2.56e11 FLOP at 1,979e12 = 129 us; 1e9 x (1 + 4/16384) bytes + activations
    # 2 x 64 x 7168 x 2 at 3.35e12 B/s = 298.8 us: memory-bound
    mem_s = (1e9 * (1 + 4 / 16384) + 2 * 64 * 7168 * 2) / 3.35e12
    assert sm.gemm(64, 1e9) == pytest.approx(mem_s)
    # 8192 rows: 1.64e13 FLOP / 1.979e15 = 8.28 ms, compute-bound
    assert sm.gemm(8192, 1e9) == pytest.approx(2 * 8192 * 1e9 / 1979e12)
    # the profile's 128-row tile makes 8 rows cost 128 rows' FLOPs (with memory made free)
    assert h100.gemm_tile_rows == 128
    floor = StepModel(m, h100, Layout(), Precision(), IDEAL.with_overrides(weight_stream=1e9))
    assert floor.gemm(8, 1e9) == pytest.approx(2 * 128 * 1e9 / 1979e12)


def test_mla_decode_attention_by_hand():
    m, h800 = load_model("deepseek-v3"), load_hardware("h800")
    assert m.attention_flops_per_pair(absorbed=True) == 2 * 128 * (512 + 512 + 64)
    sm = StepModel(m, h800, Layout(), Precision(kv="bf16"), IDEAL)
    s = StepInput("decode", tokens=128, context=4096, sequences=128)
    flops = 128 * 4096 * 278_528
    nbytes = (128 * 4096 + 128) * 576 * 2 + 2 * 128 * 7168 * 2
    assert sm.attention_core(s) == pytest.approx(max(flops / 989e12, nbytes / 3.35e12))


def test_busiest_rank_sets_the_expert_time():
    m, h100 = load_model("deepseek-v3"), load_hardware("h100")
    sm = StepModel(m, h100, Layout(ep=32), Precision(), IDEAL)
    even = sm.experts(StepInput("prefill", 16384, 512, 16, balancedness=1.0))
    skewed = sm.experts(StepInput("prefill", 16384, 512, 16, balancedness=0.5))
    assert skewed == pytest.approx(2 * even, rel=1e-6)  # compute-bound: twice the rows on the busiest rank


def test_two_batch_overlap_hides_communication():
    m, h800 = load_model("deepseek-v3"), load_hardware("h800")
    sm = StepModel(m, h800, Layout(ep=32, redundant=32), Precision())
    plain = sm.step(StepInput("prefill", 16384, 1024, 16, tbo=False, cuda_graphs=False))
    tbo = sm.step(StepInput("prefill", 16384, 1024, 16, tbo=True, cuda_graphs=False))
    assert tbo.total < plain.total
    assert tbo.parts["communication"] < 0.5 * plain.parts["communication"]


def test_every_profile_number_has_a_source():
    assert {"h100", "h200", "h800", "h20", "b200", "gb200", "cpu"} <= set(known_profiles())
    for name in known_profiles():
        hw = load_hardware(name)
        assert hw.sources and all(len(text) > 10 for text in hw.sources.values()), name
        assert max(hw.tflops.values()) > 0 and hw.memory_bandwidth_gbs > 0


def test_capacity_library_never_imports_torch():
    code = ("import sys, pkgutil, importlib, moeserve.capacity as c\n"
            "for m in pkgutil.iter_modules(c.__path__):\n"
            "    if m.name != 'calibrate': importlib.import_module('moeserve.capacity.' + m.name)\n"
            "from moeserve.capacity import cli\n"
            "cli.main(['--model', 'deepseek-v3', '--hardware', 'h100', '--gpus', '16', '--isl', '1000', '--osl', '200', '--json'])\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
