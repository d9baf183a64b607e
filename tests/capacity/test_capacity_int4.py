"""W4A16 int4 weights (Moonshot's Kimi K2-Thinking / K2.5 format) in configure: their bytes, Marlin's row
blocks, BF16 compute, and the flags that take them or refuse them, on hand-worked figures."""
from __future__ import annotations

import json

import pytest

from moeserve.capacity.cli import main
from moeserve.capacity.dtypes import BYTES, COMPUTE, nbytes
from moeserve.capacity.efficiency import Efficiency
from moeserve.capacity.gemm import marlin_padded_rows
from moeserve.capacity.hardware import load_hardware
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.model_spec import load_model
from moeserve.capacity.step_time import StepModel

IDEAL = Efficiency(gemm=1.0, attention=1.0, attention_decode=1.0, weight_stream=1.0, kv_stream=1.0, network=1.0, overlap=1.0)
KIMI_INT4 = ("--model", "kimi-k2", "--weights", "bf16", "--moe-weights", "int4")


def test_int4_is_half_a_byte_and_a_bf16_scale_per_32_computing_in_bf16():
    assert BYTES["int4"] == nbytes("int4") == 0.5 + 2 / 32 == 0.5625
    assert COMPUTE["int4"] == "bf16"


@pytest.mark.parametrize("rows, computed", [
    (1, 8), (7, 8),        # 1 / 8 < 0.9: the 8-row block
    (7.5, 16),             # 7.5 / 8 = 0.94: the next block, 16 rows
    (20, 32), (30, 48),    # 30 / 32 = 0.94 -> 48
    (50, 64), (100, 128),  # 50 / 48 >= 0.9: the last block, 64 rows, twice for 100
    (0, 0),
])
def test_marlin_takes_the_first_block_the_rows_fill_to_less_than_nine_tenths(rows, computed):
    assert marlin_padded_rows(rows) == computed


def test_an_int4_gemm_streams_its_bytes_and_computes_marlin_blocks_at_the_bf16_peak():
    m, h200 = load_model("kimi-k2"), load_hardware("h200")
    sm = StepModel(m, h200, Layout(), Precision(weights="bf16", moe="int4"), IDEAL)
    # 4 rows x 1e9 int4 weights: 0.5625e9 bytes + activations 2 x 4 x 7168 x 2 at 4.8e12 B/s = 117.2 us, memory-bound
    assert sm.gemm(4, 1e9, "int4") == pytest.approx((1e9 * 0.5625 + 2 * 4 * 7168 * 2) / 4.8e12)
    # the same GEMM in fp8 streams 1.78x the bytes
    assert sm.gemm(4, 1e9, "fp8") / sm.gemm(4, 1e9, "int4") == pytest.approx(
        (1e9 * (1 + 4 / 16384) + 2 * 4 * 7168 * 2) / (1e9 * 0.5625 + 2 * 4 * 7168 * 2))
    # with memory free: 4 rows cost Marlin's 8-row block (not WGMMA's 64) at the bf16 peak and the curve's
    # held 256-row share (0.44 / 0.65)
    free = StepModel(m, h200, Layout(), Precision(), IDEAL.with_overrides(weight_stream=1e9))
    assert free.gemm(4, 1e9, "int4") == pytest.approx(2 * 8 * 1e9 / (989e12 * 0.44 / 0.65))
    assert free.gemm(4, 1e9, "fp8") == pytest.approx(2 * 64 * 1e9 / (1979e12 * 0.44 / 0.65))
    # 8,192 rows: compute-bound at the bf16 peak, as bf16 weights would be
    assert free.gemm(8192, 1e9, "int4") == pytest.approx(free.gemm(8192, 1e9, "bf16")) == pytest.approx(2 * 8192 * 1e9 / 989e12)


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_kimi_int4_weighs_its_experts_at_int4_bytes_and_tokens_travel_in_bf16(capsys):
    args = ("--hardware", "h200", "--phase", "decode", "--tp", "8", "--batch", "4")
    int4 = run_json(capsys, *KIMI_INT4, *args)
    bf16 = run_json(capsys, "--model", "kimi-k2", "--weights", "bf16", *args)
    assert int4["precision"]["moe_weights"] == "int4" and int4["precision"]["dispatch"] == "bf16"
    m = load_model("kimi-k2")
    experts = m.num_moe_layers * m.num_experts * m.expert_params
    w4, w16 = (out["memory"]["weights_gb"] for out in (int4, bf16))
    # only the routed experts change: 2 - 0.5625 bytes each, over the 8 ranks
    assert w16 - w4 == pytest.approx(experts * (2 - 0.5625) / 8 / 1e9, rel=1e-3)


@pytest.mark.parametrize("flag", ["--kv-dtype", "--dispatch-dtype", "--combine-dtype"])
def test_int4_is_a_weight_format_only(flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--model", "kimi-k2", "--hardware", "h200", "--phase", "decode", "--tp", "8", "--batch", "4", flag, "int4"])
    assert e.value.code == 2 and "invalid choice: 'int4'" in capsys.readouterr().err


def test_emit_refuses_int4_weights_moeserve_serve_does_not_run(tmp_path, capsys):
    out = tmp_path / "serve.yaml"
    assert main([*KIMI_INT4, "--hardware", "h200", "--phase", "decode", "--tp", "8", "--batch", "4",
                 "--emit", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "it runs no INT4 weights" in err and "experts int4" in err
    assert not out.exists()
