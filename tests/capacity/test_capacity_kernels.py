"""The kernel-level knobs of the step model against hand-computed figures: GEMM curves per card and
format, floors kernel by kernel, single-batch overlap, dispatch and combine apart, MTP drafts."""
from __future__ import annotations

from dataclasses import replace

import pytest

from moeserve.capacity import comm
from moeserve.capacity.efficiency import Efficiency
from moeserve.capacity.gemm import REFERENCE, kernel_share
from moeserve.capacity.hardware import load_hardware
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.model_spec import load_model
from moeserve.capacity.step_time import DOWN_SHARE, KERNEL_WORK, StepInput, StepModel, StepTime

IDEAL = Efficiency(gemm=1.0, attention=1.0, attention_decode=1.0, weight_stream=1.0, kv_stream=1.0, network=1.0, overlap=1.0)
FREE_MEMORY = IDEAL.with_overrides(weight_stream=1e9)  # compute-bound at any size: the curve alone


def test_curves_per_card_and_format():
    assert REFERENCE == 0.65  # DeepGEMM's large grouped FP8 GEMM on H800
    # H20 (DeepGEMM's H20 tables): 0.70 of its peak at every row count, above Hopper's 0.44 at 256 rows
    assert kernel_share("hopper_h20", 32) == pytest.approx(0.70 / 0.65)
    assert kernel_share("hopper_h20", 8192, "bf16") == pytest.approx(0.70 / 0.65)
    # Blackwell BF16 (vLLM #20646); FP8 and NVFP4 fall back to Hopper's curve (gemm.py says why for NVFP4)
    assert kernel_share("blackwell", 8192, "bf16") == pytest.approx(0.63 / 0.65)
    assert kernel_share("blackwell", 512, "fp4") == kernel_share("hopper", 512) == pytest.approx(0.49 / 0.65)
    assert kernel_share("blackwell", 256, "fp8") == kernel_share("hopper", 256) == pytest.approx(0.44 / 0.65)
    assert kernel_share("cpu", 7, "fp32") == 1.0


def test_h20_gemm_at_a_swapab_tile_by_hand():
    m, h20 = load_model("deepseek-v3"), replace(load_hardware("h20"), gemm_min_tile_rows=32)
    sm = StepModel(m, h20, Layout(), Precision(), FREE_MEMORY)
    # 8 rows pad to swapAB's 32-row tile and compute at the H20 curve's 0.70 of 296 FP8 TFLOPS
    assert sm.gemm(8, 1e9, "fp8") == pytest.approx(2 * 32 * 1e9 / (296e12 * 0.70 / 0.65))
    # the same GEMM on B200 in NVFP4 and BF16: 8 rows pad to 64, at 0.44 of 9 PFLOPS (Hopper's curve held
    # below 256 rows) and at the BF16 curve's 0.50 of 2.25 PFLOPS
    sm = StepModel(m, load_hardware("b200"), Layout(), Precision(), FREE_MEMORY)
    assert sm.gemm(8, 1e9, "fp4") == pytest.approx(2 * 64 * 1e9 / (9000e12 * 0.44 / 0.65))
    assert sm.gemm(8, 1e9, "bf16") == pytest.approx(2 * 64 * 1e9 / (2250e12 * 0.50 / 0.65))


def test_floors_bind_kernel_by_kernel():
    m, b200 = load_model("deepseek-v3"), load_hardware("b200")
    sm = StepModel(m, b200, Layout(tp=8), Precision(), IDEAL)
    floor = b200.kernel_floor_us * 1e-6
    # experts of 12 floors' work: quantise and activation take a floor each, the up GEMM 2/3 of the work
    # (8 floors), the down GEMM 1/3 (4 floors)
    assert KERNEL_WORK["experts"] == (0.0, 2 / 3, 0.0, 1 / 3)
    assert sm.floored({"experts": 12 * floor})["experts"] == pytest.approx(14 * floor)
    # 3 floors' work: the up GEMM outgrows its floor (2), the down GEMM does not (1 floor)
    assert sm.floored({"experts": 3 * floor})["experts"] == pytest.approx(5 * floor)
    # a tiny part costs as many floors as it has kernels; the LM head its GEMM (232 MB of BF16 a rank at
    # TP 8: above its floor) and a gather (a floor)
    assert sm.floored({"shared_router": 1e-9})["shared_router"] == pytest.approx(5 * floor)
    head = (129280 * 7168 / 8 * 2 + 2 * 1 * 7168 * 2) / 7.7e12
    assert sm.lm_head(1 / 8) == pytest.approx(head + floor)


def test_dispatch_and_combine_apart_by_their_formats():
    m, h100 = load_model("deepseek-v3"), load_hardware("h100")
    s = StepInput("decode", 64, 2000, 64)
    sm = StepModel(m, h100, Layout(ep=8), Precision(), IDEAL)  # one node: NVLink
    dispatch, combine = comm.dispatch_and_combine(sm, s)
    copies = 64 * 8 * (1 - (7 / 8) ** 8) * (7 / 8)
    latency = h100.scaleup_latency_us * 1e-6
    assert dispatch == pytest.approx(copies * 7168 * (1 + 4 / 128) / 450e9 + latency)  # FP8 + per-128 scales
    assert combine == pytest.approx(copies * 7168 * 2 / 450e9 + latency)  # BF16
    assert comm.dispatch_combine(sm, s) == pytest.approx(dispatch + combine)


def test_single_batch_overlap_by_hand():
    m, h20 = load_model("deepseek-v3"), load_hardware("h20")
    eff = Efficiency(overlap=0.5)
    sm = StepModel(m, h20, Layout(ep=16), Precision(kv="fp8"), eff)
    s = StepInput("decode", 64, 4096, 32, balancedness=0.7)
    parts, (reduce_s, dispatch_s, combine_s) = sm.layer(s, moe=True)
    parts = sm.floored(parts)
    plain = sm.exposed_communication(s, parts, (reduce_s, dispatch_s, combine_s))
    assert plain == pytest.approx(reduce_s + dispatch_s + combine_s)
    sbo = sm.exposed_communication(replace(s, sbo=True), parts, (reduce_s, dispatch_s, combine_s))
    hidden = min(dispatch_s, parts["shared_router"]) + min(combine_s, DOWN_SHARE * parts["experts"])
    assert sbo == pytest.approx(plain - 0.5 * hidden) and 0 < sbo < plain
    assert sm.step(replace(s, sbo=True)).total < sm.step(s).total


def test_an_mtp_draft_by_hand():
    m, b200 = load_model("deepseek-v3"), load_hardware("b200")
    lay = Layout(tp=8, ep=2, moe_tp=4)
    fp4 = Precision(weights="fp4", attn="bf16")
    bf16_mtp = replace(fp4, mtp="bf16")
    s = StepInput("decode", 4 / 8, 2048, 1 / 8)
    sm = StepModel(m, b200, lay, fp4, IDEAL)
    out = StepTime()
    sm.mtp_draft_step(s, out)
    # eh_proj: 2H x H replicated on every rank, in the activation format (its GEMM plus the norms' and
    # concatenation's bytes) ...
    draft = replace(s, tokens=1 / 8)
    eh = sm.gemm(1, 2 * 7168 * 7168, "bf16") + 6 * 7168 * 2 / 7.7e12
    expected = sm.floored({"mtp_input": eh})["mtp_input"]
    # ... the MTP module's decoder layer (an MoE layer) on one token per sequence ...
    layer = StepTime()
    sm.layer_time(draft, True, layer, 1)
    expected += sum(v for k, v in layer.parts.items() if k != "communication")
    # ... the LM head and the argmax
    expected += sm.lm_head(1 / 8) + 2 * b200.kernel_floor_us * 1e-6
    assert out.parts["mtp_draft"] == pytest.approx(expected)
    assert out.parts["communication"] == pytest.approx(layer.parts["communication"])
    # the MTP layer in BF16 (TensorRT-LLM's min-latency recipe) streams 2 bytes a weight, not NVFP4's 0.56
    assert bf16_mtp.for_mtp().moe_weights == "bf16" and fp4.for_mtp() is fp4
    slow = StepTime()
    StepModel(m, b200, lay, bf16_mtp, IDEAL).mtp_draft_step(s, slow)
    assert slow.parts["mtp_draft"] > out.parts["mtp_draft"]
    # a step with three drafts: the main model on 1 + 3 tokens per sequence and three draft steps
    base = sm.step(s)
    assert sm.step(s, mtp_draft=3).total == pytest.approx(base.total + 3 * (out.parts["mtp_draft"] + layer.parts["communication"]))


def test_the_first_draft_runs_the_accepted_tokens():
    """After a verify step the first MTP draft runs every accepted token of each sequence (TensorRT-LLM's
    MTP Eagle, SGLang's draft extend), the later drafts one token; the LM head runs the last one only."""
    m, h20 = load_model("deepseek-v3"), load_hardware("h20")
    sm = StepModel(m, h20, Layout(ep=16), Precision(kv="fp8"), IDEAL)
    s = StepInput("decode", tokens=64, context=4096, sequences=32, balancedness=0.7)
    first, later = StepTime(), StepTime()
    sm.mtp_draft_step(s, first, 1.85)
    sm.mtp_draft_step(s, later)
    # the first draft's MoE layer on 32 x 1.85 tokens, its eh_proj (BF16, where the FP8 attention is not) on as
    # many rows; LM head on 32 rows either way
    layer = StepTime()
    sm.layer_time(replace(s, tokens=32 * 1.85), True, layer, 1)
    eh = sm.gemm(32 * 1.85, 2 * 7168 * 7168, "bf16") + 32 * 1.85 * 6 * 7168 * 2 / (h20.memory_bandwidth_gbs * 1e9)
    expected = (sm.floored({"mtp_input": eh})["mtp_input"] + sum(v for k, v in layer.parts.items() if k != "communication")
                + sm.lm_head(32) + 2 * h20.kernel_floor_us * 1e-6)
    assert first.parts["mtp_draft"] == pytest.approx(expected)
    assert first.parts["mtp_draft"] > later.parts["mtp_draft"]
    # a step of two drafts at acceptance 1.85: the first on the accepted tokens, the second on one
    two = sm.step(replace(s, tokens=96), mtp_draft=2, mtp_accept=1.85)
    main = sm.step(replace(s, tokens=96))
    assert two.total == pytest.approx(main.total + first.parts["mtp_draft"] + first.parts["communication"]
                                      + later.parts["mtp_draft"] + later.parts["communication"])
