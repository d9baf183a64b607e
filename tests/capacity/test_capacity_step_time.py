"""The step-time model on hand-worked rooflines, and the purity of the library (no torch)."""
from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace

import pytest

from moeserve.capacity import comm
from moeserve.capacity.efficiency import Efficiency
from moeserve.capacity.gemm import kernel_share, padded_rows
from moeserve.capacity.hardware import known_profiles, load_hardware
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.model_spec import load_model
from moeserve.capacity.step_time import KERNELS, REFERENCE_HOST_OPS, StepInput, StepModel

IDEAL = Efficiency(gemm=1.0, attention=1.0, attention_decode=1.0, weight_stream=1.0, kv_stream=1.0, network=1.0, overlap=1.0)
FP8 = 1 + 4 / 16384  # bytes per fp8 weight with its per-128x128-block fp32 scale


def test_gemm_roofline_by_hand():
    m, h100 = load_model("deepseek-v3"), load_hardware("h100")
    sm = StepModel(m, h100, Layout(), Precision(weights="fp8", activations="bf16"), IDEAL)
    # 64 rows x 1e9 fp8 weights: 1e9 x FP8 bytes + activations 2 x 64 x 7168 x 2 at 3.35e12 B/s = 298.8 us: memory-bound
    mem_s = (1e9 * FP8 + 2 * 64 * 7168 * 2) / 3.35e12
    assert sm.gemm(64, 1e9, "fp8") == pytest.approx(mem_s)
    # 8192 rows: beyond the curve's last point (share 1): 1.64e13 FLOP / 1.979e15 = 8.28 ms, compute-bound
    assert sm.gemm(8192, 1e9, "fp8") == pytest.approx(2 * 8192 * 1e9 / 1979e12)
    # with memory free, 8 rows cost a 64-row tile (WGMMA's M on Hopper) at the curve's 64-row share: 0.44 / 0.65
    free = StepModel(m, h100, Layout(), Precision(), IDEAL.with_overrides(weight_stream=1e9))
    assert h100.gemm_tiles() == [64, 128]
    assert free.gemm(8, 1e9, "fp8") == pytest.approx(2 * 64 * 1e9 / (1979e12 * 0.44 / 0.65))
    # swapAB's 32-row tiles: 8 rows cost 32
    swap = StepModel(m, replace(h100, gemm_min_tile_rows=32), Layout(), Precision(), IDEAL.with_overrides(weight_stream=1e9))
    assert swap.gemm(8, 1e9, "fp8") == pytest.approx(2 * 32 * 1e9 / (1979e12 * 0.44 / 0.65))
    # a weight format of its own: bf16 weights stream twice the bytes and compute at the bf16 peak
    assert sm.gemm(64, 1e9, "bf16") == pytest.approx((1e9 * 2 + 2 * 64 * 7168 * 2) / 3.35e12)
    assert sm.gemm(8192, 1e9, "bf16") == pytest.approx(2 * 8192 * 1e9 / 989e12)


def test_row_tiles_and_the_published_curve():
    assert padded_rows(130, [64, 128]) == 192  # three 64-row tiles waste less than two 128-row ones
    assert padded_rows(46, [32, 64, 128]) == 64 and padded_rows(20, [32, 64, 128]) == 32
    assert padded_rows(0, [64]) == 0
    # DeepGEMM's masked-layout shares at 256 and 512 rows (0.44, 0.49), log-linear between them
    assert kernel_share("hopper", 256) == pytest.approx(0.44 / 0.65)
    assert kernel_share("hopper", 362) == pytest.approx((0.44 + 0.05 * math.log(362 / 256) / math.log(2)) / 0.65)
    assert kernel_share("hopper", 100_000) == 1.0 and kernel_share("cpu", 3) == 1.0


def test_mla_decode_attention_by_hand_and_in_fp8():
    m, h800 = load_model("deepseek-v3"), load_hardware("h800")
    assert m.attention_flops_per_pair(absorbed=True) == 2 * 128 * (512 + 512 + 64)
    s = StepInput("decode", tokens=128, context=4096, sequences=128)
    flops = 128 * 4096 * 278_528
    for kv, peak, nbytes_per in (("bf16", 989e12, 2), ("fp8", 1979e12, FP8)):
        sm = StepModel(m, h800, Layout(), Precision(kv=kv), IDEAL)
        nbytes = (128 * 4096 + 128) * 576 * nbytes_per + 2 * 128 * 7168 * 2
        # FP8 KV: attention computes at the FP8 tensor-core peak (FlashMLA's FP8 path), reading half the bytes
        assert sm.attention_core(s) == pytest.approx(max(flops / peak, nbytes / 3.35e12))
    # a card without FP8 tensor cores computes FP8 KV at BF16
    no_fp8 = replace(h800, tflops={"bf16": 989})
    assert StepModel(m, no_fp8, Layout(), Precision(weights="bf16", kv="fp8"), IDEAL).attention_format() == "bf16"


def test_tp_prefill_attends_to_half_the_prompt_and_h20_attention_share():
    """A prompt prefilled by a TP group in one step: its tokens (batch per GPU x tp) attend to half the
    prompt on average, not half of one GPU's share; on an H20 FlashAttention-3 reaches 1.365 times the
    share of its peak it reaches on Hopper (flash-attention issue #1310 against tritonbench PR #1254).
    IDEAL's attention factor of 1 does not apply: Qwen3 is GQA, at FlashAttention-3's published share."""
    from moeserve.capacity.gemm import attention_share
    from moeserve.capacity.predict import Options, Predictor, Workload

    assert attention_share("hopper_h20") == pytest.approx((126.2 / 148) / (617.773 / 989))
    assert attention_share("hopper") == attention_share("blackwell") == 1.0
    m, h20 = load_model("qwen3-235b-a22b"), load_hardware("h20")
    prompt, tp = 30720, 8
    pred = Predictor(m, h20, Precision(weights="bf16"), IDEAL)
    p = pred.prefill(Layout(tp, 1, 0), prompt / tp, Workload(prompt, 1), Options())
    flops = prompt * (prompt / 2) * m.attention_flops_per_pair(absorbed=False) / tp  # one layer on one GPU
    floor = h20.kernel_floor_us * 1e-6
    # GQA at head dim 128 runs FlashAttention-3 at its published share of Hopper's peak (617.8 of 989 TFLOPS,
    # tritonbench PR #1254), times the H20's ratio: 0.853 of the H20's 148 TFLOPS, whatever the fitted factor
    share = 617.773 / 989 * attention_share("hopper_h20")
    assert share == pytest.approx(126.2 / 148)
    per_layer = flops / (148e12 * share) + 2 * floor  # rope/cache and combine kernels: floors
    assert p.breakdown_ms["attention"] == pytest.approx(m.num_layers * per_layer * 1e3, rel=1e-3)


def test_prefill_attention_share_by_kind():
    """MLA's expanded prefill (head dim 192/128, no published kernel figure) keeps the fitted `attention`
    factor; GQA's FlashAttention-3 (head dim 128) its published kernel share, 0.625 of an H100's peak."""
    s = StepInput("prefill", tokens=4096, context=2048, sequences=1)
    h100 = load_hardware("h100")
    slow = Efficiency(attention=0.1)  # the other factors at their defaults
    qwen = StepModel(load_model("qwen3-235b-a22b"), h100, Layout(), Precision(weights="bf16"), slow)
    flops = 4096 * 2048 * qwen.m.attention_flops_per_pair(absorbed=False)
    assert qwen.attention_core(s) == pytest.approx(flops / (989e12 * 617.773 / 989))
    ds = StepModel(load_model("deepseek-v3"), h100, Layout(), Precision(weights="bf16"), slow)
    flops = 4096 * 2048 * ds.m.attention_flops_per_pair(absorbed=False)
    assert ds.attention_core(s) == pytest.approx(flops / (989e12 * 0.1))
    # a CPU runs no FlashAttention-3: its calibrated factor, as before
    cpu, fp32 = load_hardware("cpu"), Precision(weights="fp32", activations="fp32", kv="fp32")
    on_cpu = [StepModel(load_model("qwen3-235b-a22b"), cpu, Layout(), fp32, Efficiency(attention=a)).attention_core(s)
              for a in (0.1, 0.2)]
    flops = 4096 * 2048 * qwen.m.attention_flops_per_pair(absorbed=False)
    assert on_cpu[0] == pytest.approx(flops / (cpu.peak_flops("fp32") * 0.1)) and on_cpu[0] == pytest.approx(2 * on_cpu[1])



def test_a_chunked_prompt_attends_to_its_earlier_chunks():
    """A 32,768-token prompt prefilled by TP 8 in steps of 8,192 tokens (1,024 a GPU): its four chunks
    attend to 0, 8,192, 16,384 and 24,576 cached tokens before them, 12,288 on average, plus half of
    their own: 16,384 = half the prompt, so the prompt's attention is its causal L^2 / 2 pairs; the
    earlier chunks are read from the cache, and MLA expands their latents with kv_b every chunk."""
    from moeserve.capacity.predict import Options, Predictor, Workload

    qwen, h100 = load_model("qwen3-235b-a22b"), load_hardware("h100")
    prompt, tp, per_gpu = 32768, 8, 1024
    floor = h100.kernel_floor_us * 1e-6
    pred = Predictor(qwen, h100, Precision(weights="bf16"), IDEAL)
    p = pred.prefill(Layout(tp, 1, 0), per_gpu, Workload(prompt, 1), Options())
    pairs = per_gpu * tp * (12288 + 4096)  # the step's 8,192 queries x their mean context
    flops = pairs * qwen.attention_flops_per_pair(absorbed=False) / tp
    kv_read = (12288 + 8192) * 2 * 1 * 128 * 2 + 2 * 8192 * 4096 * 2  # cached + new keys/values of 1 KV head, q/o
    fa3 = 989e12 * 617.773 / 989  # GQA prefill at FlashAttention-3's published share (gemm.FA3_SHARE)
    attention = max(flops / fa3, kv_read / 3.35e12)
    assert attention == flops / fa3  # compute-bound
    assert p.breakdown_ms["attention"] == pytest.approx(qwen.num_layers * (attention + 2 * floor) * 1e3, rel=1e-3)
    # the whole prompt in one step attends to the same mean context: half the prompt
    one = pred.prefill(Layout(tp, 1, 0), prompt / tp, Workload(prompt, 1), Options())
    # time to first token: the prompt's four steps of 8,192 tokens, after half a step of waiting
    assert p.ttft_ms == pytest.approx(4.5 * p.step_ms) and one.ttft_ms == pytest.approx(1.5 * one.step_ms)
    floors_ms = qwen.num_layers * 2 * floor * 1e3  # the rope/cache and combine kernels of each step
    assert one.breakdown_ms["attention"] - floors_ms == pytest.approx(4 * (p.breakdown_ms["attention"] - floors_ms))
    # MLA: every chunk expands the 12,288 earlier tokens' latents (1,536 a GPU) with kv_b (512 -> 128 x (128 + 128))
    ds = load_model("deepseek-v3")
    mla = Predictor(ds, h100, Precision(weights="bf16"), IDEAL)
    chunked = mla.prefill(Layout(tp, 1, 0), per_gpu, Workload(prompt, 1), Options())
    kv_b = 512 * 128 * (128 + 128)
    sm = StepModel(ds, h100, Layout(tp), Precision(weights="bf16"), IDEAL)
    parts, _ = sm.layer(StepInput("prefill", per_gpu, 16384, 1, prefix_tokens=12288 / tp), moe=True)
    plain, _ = sm.layer(StepInput("prefill", per_gpu, 16384, 1), moe=True)
    assert parts["projections"] - plain["projections"] == pytest.approx(sm.gemm(12288, kv_b / tp, "bf16"))
    assert chunked.breakdown_ms["projections"] > mla.prefill(Layout(tp, 1, 0), per_gpu, Workload(8192, 1),
                                                             Options()).breakdown_ms["projections"]

def test_mla_down_projections_are_replicated_over_tp():
    """q_a, kv_a and the rope key (hidden -> 1536 + 512 + 64) are one replicated GEMM on every TP rank
    (SGLang's fused_qkv_a_proj_with_mqa, TensorRT-LLM's data-parallel Fuse_A); q_b, kv_b and o split."""
    m = load_model("deepseek-v3")
    down = 7168 * (1536 + 512 + 64)
    split = 1536 * 128 * 192 + 512 * 128 * 128 + 512 * 128 * 128 + 128 * 128 * 7168
    assert down + split == m.attention_params
    assert m.attention_params_per_rank(1) == m.attention_params
    assert m.attention_params_per_rank(8) == pytest.approx(down + split / 8)
    assert m.mla_projections(8) == pytest.approx((down, 1536 * 128 * 192 / 8, 512 * 128 * 128 / 8, 512 * 128 * 128 / 8,
                                                  128 * 128 * 7168 / 8))
    qwen = load_model("qwen3-235b-a22b")  # GQA: every projection split over TP
    assert qwen.attention_params_per_rank(4) == qwen.attention_params / 4
    # the kernels' work shares follow the weights each rank reads
    sm = StepModel(m, load_hardware("h200"), Layout(tp=8), Precision(), IDEAL)
    shares = sm.kernel_work("projections")
    assert shares[0] == pytest.approx(down / (down + split / 8)) and sum(shares) == pytest.approx(1.0)
    # and the memory model holds the replicated down projections on every rank
    from moeserve.capacity.memory import weight_bytes
    fp8 = Precision(weights="fp8")
    tp8, tp1 = weight_bytes(m, Layout(tp=8, ep=8), fp8), weight_bytes(m, Layout(tp=1, ep=8), fp8)
    assert tp1 - tp8 == pytest.approx(61 * split * 7 / 8 * FP8 + 58 * m.shared_params * 7 / 8 * FP8
                                      + 3 * m.dense_mlp_params * 7 / 8 * FP8 + m.embedding_params * 2 * 7 / 8, rel=1e-6)


def test_busiest_rank_sets_the_expert_time():
    m, h100 = load_model("deepseek-v3"), load_hardware("h100")
    sm = StepModel(m, h100, Layout(ep=32), Precision(), IDEAL)
    even = sm.experts(StepInput("prefill", 16384, 512, 16, balancedness=1.0))
    skewed = sm.experts(StepInput("prefill", 16384, 512, 16, balancedness=0.5))
    assert skewed == pytest.approx(2 * even, rel=1e-6)  # compute-bound: twice the rows on the busiest rank


def test_moe_tp_splits_each_expert_over_its_group():
    m = load_model("deepseek-v3")
    lay = Layout(tp=8, ep=2, moe_tp=4).validate(256)
    assert (lay.world, lay.expert_tp, lay.attention_groups, lay.slots_per_rank(256)) == (8, 4, 1, 128)
    sm = StepModel(m, load_hardware("b200"), lay, Precision(), IDEAL)
    active, rows, params = sm.expert_rows(StepInput("decode", 1, 1024, 1))
    # every rank of an EP group sees all its group's rows (1 token x top-8 x moe_tp 4 spread over 128 slots)
    assert params == m.expert_params / 4
    assert active * rows == pytest.approx(1 * 8 * 4)
    assert active == pytest.approx(128 * (1 - (1 - 1 / 128) ** 32))
    # one attention group: every rank holds every token after the all-reduce, no dispatch
    assert comm.dispatch_combine(sm, StepInput("decode", 1, 1024, 1)) == 0.0
    # moeserve's own layouts are unchanged: experts over tp at ep 1, whole experts at ep > 1
    assert Layout(tp=8).expert_tp == 8 and Layout(tp=2, ep=8).expert_tp == 1 and Layout(tp=2, ep=8).world == 8
    with pytest.raises(ValueError, match="--moe-tp 4"):
        Layout(tp=8, ep=2).validate(256)
    with pytest.raises(ValueError, match="not a multiple of --tp 8"):
        Layout(tp=8, ep=3, moe_tp=1).validate(256)


def test_latency_floors_bind_a_batch_of_one():
    m, b200 = load_model("deepseek-v3"), load_hardware("b200")
    sm = StepModel(m, b200, Layout(tp=8, ep=4, moe_tp=2), Precision(weights="fp4", attn="bf16"), IDEAL)
    s = StepInput("decode", 1 / 8, 2048, 1 / 8)
    parts, _ = sm.layer(s, moe=True)
    floored = sm.floored(parts)
    floor = b200.kernel_floor_us * 1e-6
    assert floored["shared_router"] == pytest.approx(KERNELS["shared_router"] * floor)  # a few KB of work: the floor
    assert floored["elementwise"] == pytest.approx(KERNELS["elementwise"] * floor)
    assert set(parts) == {"attention", "projections", "experts", "shared_router", "elementwise"}
    # eager the kernels keep their floors and the layer waits for the host instead (host_bound, below)
    # TP all-reduce of one token: the profile's small-message latency plus a ring's bytes
    ring = 2 * 7 / 8 * (1 / 8 * 8 * 7168 * 2) / (b200.scaleup_gbs * 1e9)
    assert comm.all_reduce(sm, s) == pytest.approx(ring + b200.allreduce_latency_us * 1e-6)
    graphs = sm.step(s).total
    eager = sm.step(replace(s, cuda_graphs=False)).total
    assert eager >= graphs > m.num_layers * 20 * floor


def test_an_eager_layer_takes_the_longer_of_its_gpu_time_and_the_hosts():
    """Eager, the host issues a layer's operators (layer_overhead_us: SGLang PR #12160's eager DeepSeek-V3
    extend of one token, 82.6 ms, less the 1.0 ms step overhead, over 61 layers = 1,340 us) while the GPU
    runs those already issued. By hand, one token on 8 H200: every layer's GPU time is far below 1.34 ms,
    so the pass is 61 x 1.34 ms plus the LM head and the step's 1.0 ms + 2 us (82.6 ms, the PR's figure):
    the host time is per operator, DeepSeek-V3's 3 dense layers of 22 and 58 MoE layers of 30 taking 1.34 ms
    on average (1.00 and 1.36 ms);
    with two-batch overlap the host issues each micro-batch's operators, 2.68 ms a layer; a prefill whose
    layers outlast the host (16K tokens a GPU) is unchanged. (1,340 us is 1.338 rounded: 82.8 ms.)"""
    m, h200 = load_model("deepseek-v3"), load_hardware("h200")
    assert h200.layer_overhead_us == 1340
    sm = StepModel(m, h200, Layout(tp=8), Precision(), IDEAL)
    one = StepInput("prefill", 1 / 8, 2, 1 / 8, prefix_tokens=1 / 8)
    graphs, eager = sm.step(one), sm.step(replace(one, cuda_graphs=False))
    lm_head = eager.parts["lm_head"]
    assert (sm.host_ops(False), sm.host_ops(True)) == (22, 30)
    assert eager.parts["overhead"] == pytest.approx(61 * 1.34e-3 + 1.0e-3 + 2e-6 / 8 - sum(
        v for k, v in eager.parts.items() if k not in ("overhead", "lm_head")))
    assert eager.total == pytest.approx(61 * 1.34e-3 + lm_head + 1.0e-3 + 2e-6 / 8)
    assert eager.total * 1e3 == pytest.approx(82.6, abs=0.3) and graphs.total < 0.2 * eager.total
    assert eager.parts["attention"] == graphs.parts["attention"]  # the GPU's work is unchanged; the wait is overhead
    tbo = sm.step(replace(one, cuda_graphs=False, tbo=True))
    assert tbo.total == pytest.approx(61 * 2.68e-3 + tbo.parts["lm_head"] + 1.0e-3 + 2e-6 / 8)
    big = StepInput("prefill", 16384, 8192, 2)
    assert sm.step(replace(big, cuda_graphs=False)).total == pytest.approx(sm.step(big).total)


def test_an_eager_layers_host_time_is_its_operators():
    """The host's time is per operator (HOST_OPS, SGLang's forward paths): DeepSeek-V3's mean layer (29.6
    operators) takes 1,340 us, 45.3 us an operator. By hand: a Qwen3-MoE layer issues its two norms and two
    all-reduces (4), qkv and o GEMMs, RoPE and attention (4), the q and k RMSNorms (2) and the routed experts'
    7 without a shared expert: 17 operators, 17 / 29.61 x 1,340 = 769 us; one token on 8 H200 through its
    94 layers 72.3 ms plus the LM head and the step's 1.0 ms + 2 us. A dense GQA layer (Llama-like) 11."""
    assert REFERENCE_HOST_OPS == pytest.approx((3 * 22 + 58 * 30) / 61)
    m, h200 = load_model("qwen3-235b-a22b"), load_hardware("h200")
    sm = StepModel(m, h200, Layout(tp=8), Precision(), IDEAL)
    assert m.num_moe_layers == 94 and m.num_dense_layers == 0 and sm.host_ops(True) == 17
    assert sm.host_ops(False) == 4 + 4 + 2 + 3
    one = StepInput("prefill", 1 / 8, 2, 1 / 8, prefix_tokens=1 / 8)
    eager = sm.step(replace(one, cuda_graphs=False))
    layer = 1340e-6 * 17 / (1806 / 61)
    assert layer * 1e6 == pytest.approx(769, abs=1)
    assert eager.total == pytest.approx(94 * layer + eager.parts["lm_head"] + 1.0e-3 + 2e-6 / 8)
    mixtral = replace(m, qk_norm=False)
    assert StepModel(mixtral, h200, Layout(tp=8), Precision(), IDEAL).host_ops(True) == 15


def test_rocm_profiles_take_the_published_rocm_latencies():
    """MI300X and MI355X: the TP all-reduce's latency is the measured ROCm custom all-reduce (MI300X 7.2
    us: SGLang PR #6619 at TP 4, 2 KB; MI355X 6.3 us: vLLM PR #39080 at TP 8, 24 KB); eager, the host's
    1,340 us a layer as on NVIDIA (the framework's side); the graph floor stays the fitted one
    (Kog's ~4.5 us launch + ~0.5 us HBM latency is within it). One token at TP 8, by hand: 7168 x 2 =
    14,336 bytes, 2 x 7/8 of them over 448 GB/s of Infinity Fabric = 0.056 us, plus 7.2 us."""
    m, mi300x, mi355x = load_model("deepseek-v3"), load_hardware("mi300x"), load_hardware("mi355x")
    assert (mi300x.allreduce_latency_us, mi355x.allreduce_latency_us) == (7.2, 6.3)
    assert mi300x.layer_overhead_us == mi355x.layer_overhead_us == 1340 and mi300x.kernel_floor_us == mi355x.kernel_floor_us == 5.875
    s = StepInput("decode", 1 / 8, 2048, 1 / 8)
    sm = StepModel(m, mi300x, Layout(tp=8), Precision(), IDEAL)
    assert comm.all_reduce(sm, s) * 1e6 == pytest.approx(0.056 + 7.2, abs=1e-3)
    sm355 = StepModel(m, mi355x, Layout(tp=8), Precision(), IDEAL)
    assert comm.all_reduce(sm355, s) * 1e6 == pytest.approx(2 * 7 / 8 * 14_336 / 537e3 + 6.3)


def test_tp_all_reduce_across_nodes_runs_hierarchically_over_the_nics():
    """TP 16 on 8-GPU H100 nodes, 32 tokens per GPU (hand-computed): 32 x 16 tokens x 7168 x 2 bytes =
    7,340,032 bytes; inside a node 2 x 7/8 of them over NVLink (450 GB/s), between the two nodes 2 x 1/2
    of each GPU's 1/8 share over its NIC (50 GB/s), plus NCCL's multi-node latency (47 us: nccl-tests
    at 16 ranks over two nodes)."""
    m, h100 = load_model("deepseek-v3"), load_hardware("h100")
    sm = StepModel(m, h100, Layout(tp=16), Precision(), IDEAL)
    s = StepInput("decode", 32, 2048, 32)
    nbytes = 32 * 16 * 7168 * 2
    assert nbytes == 7_340_032
    inside = 2 * 7 / 8 * nbytes / 450e9  # 28.5 us
    between = 2 * 1 / 2 * nbytes / 8 / 50e9  # 18.4 us
    assert h100.scaleout_allreduce_latency_us == 47
    assert comm.all_reduce(sm, s) == pytest.approx(inside + between + 47e-6)
    assert comm.all_reduce(sm, s) * 1e6 == pytest.approx(93.9, abs=0.1)
    # the same group inside one NVLink domain: a ring over NVLink and the one-shot kernel's latency
    one_node = StepModel(m, replace(h100, gpus_per_node=16), Layout(tp=16), Precision(), IDEAL)
    assert comm.all_reduce(one_node, s) == pytest.approx(2 * 15 / 16 * nbytes / 450e9 + 8e-6)
    assert comm.all_reduce(sm, s) > comm.all_reduce(one_node, s)


def test_low_latency_calls_across_nodes_take_at_least_deepep_measured_time():
    """H20, EP16 over two nodes, 1 token per GPU at decode (hand-computed): the bytes take ~1 us, so each
    call costs DeepEP's measured time at EP16 (dispatch 118 us, combine 195 us); EP24 lies between
    EP16 and EP32 on a log scale: 118 + (155 - 118) x log2(1.5) = 139.6 us. With two-batch overlap the
    wait hides behind the other micro-batch: bytes and the profile's latency only."""
    m, h20 = load_model("deepseek-v3"), load_hardware("h20")
    s = StepInput("decode", 1, 4096, 1)
    sm = StepModel(m, h20, Layout(ep=16), Precision(), IDEAL)
    assert comm.dispatch_and_combine(sm, s) == pytest.approx((118e-6, 195e-6))
    assert comm.ll_floor(24)[0] * 1e6 == pytest.approx(139.6, abs=0.05)
    assert comm.ll_floor(4) == comm.ll_floor(8) and comm.ll_floor(512) == comm.ll_floor(256)
    dispatch_tbo, _ = comm.dispatch_and_combine(sm, replace(s, tbo=True))
    assert dispatch_tbo < 70e-6 and dispatch_tbo > h20.scaleout_latency_us * 1e-6
    # inside one node (NVLink) and at prefill no floor applies
    one_node = StepModel(m, h20, Layout(ep=8), Precision(), IDEAL)
    assert comm.dispatch_and_combine(one_node, s)[0] < 30e-6
    assert comm.dispatch_and_combine(sm, replace(s, phase="prefill"))[0] < 70e-6


def test_two_batch_overlap_hides_communication():
    m, h800 = load_model("deepseek-v3"), load_hardware("h800")
    sm = StepModel(m, h800, Layout(ep=32, redundant=32), Precision())
    plain = sm.step(StepInput("prefill", 16384, 1024, 16, tbo=False, cuda_graphs=False))
    tbo = sm.step(StepInput("prefill", 16384, 1024, 16, tbo=True, cuda_graphs=False))
    assert tbo.total < plain.total
    assert tbo.parts["communication"] < 0.5 * plain.parts["communication"]


def test_dispatch_moves_the_dispatch_and_combine_formats():
    m, h100 = load_model("deepseek-v3"), load_hardware("h100")
    s = StepInput("decode", 64, 2000, 64)
    lay = Layout(ep=8)  # one node: NVLink only
    fp8 = comm.dispatch_combine(StepModel(m, h100, lay, Precision(), IDEAL), s)
    fp4 = comm.dispatch_combine(StepModel(m, h100, lay, Precision(moe="fp4", dispatch="fp4"), IDEAL), s)
    touched = 8 * (1 - (7 / 8) ** 8)
    fixed = 2 * h100.scaleup_latency_us * 1e-6
    row_fp8 = 7168 * ((1 + 4 / 128) + 2)
    assert fp8 == pytest.approx(64 * touched * (7 / 8) * row_fp8 / 450e9 + fixed)
    assert fp4 < fp8  # NVFP4 dispatch: 0.5625 bytes a value instead of 1.03


def test_offload_streams_each_layers_experts_over_the_host_link():
    m, gb200 = load_model("deepseek-v3"), load_hardware("gb200")
    sm = StepModel(m, gb200, Layout(ep=2), Precision(moe="fp4"), IDEAL)
    per_layer = 128 * m.expert_params * (0.5 + 1 / 16)
    assert sm.offload_seconds() == pytest.approx(per_layer / (gb200.host_link_gbs * 1e9))
    s = StepInput("prefill", 16384, 1000, 8)
    plain, offloaded = sm.step(s), sm.step(replace(s, offload=1.0))
    assert offloaded.total >= plain.total and "offload" not in plain.parts
    with pytest.raises(ValueError, match="host link"):
        StepModel(m, replace(gb200, host_link_gbs=0), Layout(ep=2), Precision(), IDEAL).offload_seconds()


def test_partial_offload_hides_behind_the_layers_between_streamed_ones():
    """Every MoE layer streamed: each exposes transfer - its own time (t - c). A quarter streamed (one in
    four, the rest resident): each streamed layer's transfer runs behind the four layers since the last
    one, so 58 x 0.25 layers expose max(0, t - 4 c)."""
    m, gb200 = load_model("deepseek-v3"), load_hardware("gb200")
    sm = StepModel(m, replace(gb200, host_link_gbs=5), Layout(ep=2), Precision(moe="fp4"), IDEAL)
    s = StepInput("prefill", 16384, 1000, 8)
    t = sm.offload_seconds()
    full = sm.step(replace(s, offload=1.0))
    c = t - full.parts["offload"] / 58  # the slow link: every layer exposes t - c > 0
    assert 0 < c < t
    quarter = sm.step(replace(s, offload=0.25))
    assert quarter.parts["offload"] == pytest.approx(58 * 0.25 * max(0.0, t - 4 * c))
    assert quarter.total - quarter.parts["offload"] == pytest.approx(sm.step(s).total)
    # a fast link hides the quarter entirely
    fast = StepModel(m, replace(gb200, host_link_gbs=5 * t / (3 * c)), Layout(ep=2), Precision(moe="fp4"), IDEAL)
    assert "offload" not in fast.step(replace(s, offload=0.25)).parts


def test_every_profile_number_has_a_source():
    assert {"h100", "h200", "h800", "h20", "b200", "gb200", "gb300", "mi300x", "mi355x", "cpu"} <= set(known_profiles())
    for name in known_profiles():
        hw = load_hardware(name)
        assert hw.sources and all(len(text) > 10 for text in hw.sources.values()), name
        assert not any(text.startswith("not in the profile") for text in hw.sources.values()), name
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


def test_pipeline_stages_by_hand():
    """TP 8 x PP 2 of Kimi K2 on two H800 nodes: each GPU holds ceil(61 / 2) = 31 of the 61 layers and one
    end's vocabulary matrix, and 31/61 of a token's KV; a token's pass hands 2 x 7,168 BF16 values of each of
    the group's tokens to the next stage once, over the NIC (50 GB/s) at the cross-node latency (47 us);
    one sequence runs the stages one after the other, the whole model's layers at its micro-batch."""
    from moeserve.capacity.memory import kv_bytes_per_token, weight_bytes
    from moeserve.capacity.predict import Options, Predictor, Workload

    m, h800 = load_model("kimi-k2"), load_hardware("h800")
    prec = Precision(weights="fp8", kv="fp8")
    tp8, pp2 = Layout(tp=8), Layout(tp=8, pp=2)
    assert pp2.gpus == 16 and pp2.world == 8
    vocab = m.embedding_params * 2 / 8  # BF16, split over TP 8
    assert weight_bytes(m, pp2, prec) == pytest.approx((weight_bytes(m, tp8, prec) - vocab) * 31 / 61 + vocab / 2)
    assert kv_bytes_per_token(m, pp2, prec) == pytest.approx(kv_bytes_per_token(m, tp8, prec) * 31 / 61)
    sm = StepModel(m, h800, pp2, prec, IDEAL)
    s = StepInput("decode", 0.125, 1256, 0.125)
    handoff = 0.125 * 8 * 2 * 7168 * 2 / 50e9 + 47e-6
    assert comm.pipeline_handoffs(sm, s) == pytest.approx(handoff)
    assert comm.pipeline_handoffs(StepModel(m, replace(h800, gpus_per_node=16), pp2, prec, IDEAL), s) == pytest.approx(
        0.125 * 8 * 2 * 7168 * 2 / 200e9 + 8e-6)  # both stages in one 16-GPU domain: NVLink and its latency
    pred = Predictor(m, h800, prec, IDEAL)
    w = Workload(1000, 512)
    one = pred.decode(pp2, 1 / 16, w, Options())  # one sequence on 16 GPUs
    flat = pred.decode(tp8, 1 / 8, w, Options())  # the same sequence through all 61 layers at TP 8
    assert one.step_ms == pytest.approx(flat.step_ms + handoff * 1e3)
    assert one.output_tokens_per_s_per_gpu == pytest.approx(1 / 16 / (one.step_ms / 1e3))
    # 64 sequences a GPU: two micro-batches of 64 a stage GPU in flight, a pass at 64 a GPU
    full = pred.decode(pp2, 64, w, Options())
    assert full.step_ms == pytest.approx(pred.decode(tp8, 64, w, Options()).step_ms + comm.pipeline_handoffs(
        sm, StepInput("decode", 64, 1256, 64)) * 1e3)
    assert full.output_tokens_per_s_per_gpu == pytest.approx(64 / (full.step_ms / 1e3))
    assert full.memory["kv_gb"] == pytest.approx(64 * 2 * 8 * 1512 * kv_bytes_per_token(m, pp2, prec) / 1e9, rel=1e-3)


def test_kernels_a_layer_launches_follow_the_architecture():
    """Qwen3-MoE has no shared expert (router GEMM and top-k only) and normalises q and k per head (one
    kernel between qkv and o); DeepSeek-V3 launches its shared expert; Mixtral neither. At batch 1 on an
    H200 each kernel is at the floor, so a part costs its kernel count x the floor."""
    h200 = load_hardware("h200")
    floor = h200.kernel_floor_us * 1e-6
    s = StepInput("decode", 1, 1024, 1)
    for name, router_kernels, projection_kernels in (("qwen3-235b-a22b", 2, 3), ("deepseek-v3", 5, None),
                                                     ("mixtral-8x7b", 2, 2)):
        sm = StepModel(load_model(name), h200, Layout(tp=8), Precision(weights="fp8"), IDEAL)
        assert len(sm.kernel_work("shared_router")) == router_kernels, name
        parts = sm.floored(sm.layer(s, True)[0])
        assert parts["shared_router"] == pytest.approx(router_kernels * floor), name
        if projection_kernels is not None:
            assert len(sm.kernel_work("projections")) == projection_kernels, name
            assert parts["projections"] == pytest.approx(projection_kernels * floor), name
    assert load_model("qwen3-235b-a22b").qk_norm and not load_model("mixtral-8x7b").qk_norm


def test_colocated_decodes_ride_in_the_prefill_chunks_steps():
    """vLLM V1 and TensorRT-LLM schedule the running decodes into the prefill chunk's step: with one attention
    group, a step of P = chunk step + the decodes' attention yields the batch's tokens too. Per GPU, prompts
    a second while prefilling r = (8,192 / tp) / P / isl, share of time in those steps f = out / osl / r, and
    out = dec (1 - f) + dec f D / P, D the decode step: out = dec / (1 + dec (1 - D / P) / (osl r))."""
    from moeserve.capacity.predict import Options, Predictor, Workload
    pred = Predictor(load_model("kimi-k2"), load_hardware("b200"), Precision(weights="bf16", moe="fp4"))
    lay, w = Layout(4, 1, 0), Workload(8000, 1000)
    d = pred.decode(lay, 16, w, Options())
    p = pred.prefill(lay, 2048, w, Options())
    big_p = p.step_ms + d.breakdown_ms["attention"]
    r = 2048 / (big_p / 1e3) / w.isl
    dec = d.output_tokens_per_s_per_gpu
    want = dec / (1 + dec * (1 - d.step_ms / big_p) / (w.osl * r))
    got = pred.colocated(lay, 16, w, Options()).output_tokens_per_s_per_gpu
    assert got == pytest.approx(want, rel=1e-6)
    # SGLang's default scheduler (no mixed chunk): the decodes wait out the chunk, fewer tokens
    stalled = pred.colocated(lay, 16, w, Options(prefill="stalled")).output_tokens_per_s_per_gpu
    assert stalled == pytest.approx(dec / (1 + dec / (w.osl * 2048 / (p.step_ms / 1e3) / w.isl)), rel=1e-6)
    assert stalled < got < dec


@pytest.mark.parametrize("mode", ["chunked", "", "Mixed", None, True])
def test_options_refuse_an_unknown_prefill_mode(mode):
    from moeserve.capacity.predict import PREFILL_MODES, Options
    assert PREFILL_MODES == ("mixed", "stalled", "separate", "separate-compiled") and Options().prefill == "mixed"
    with pytest.raises(ValueError, match="is not one of mixed, stalled, separate, separate-compiled"):
        Options(prefill=mode)
    with pytest.raises(ValueError, match="is not one of"):
        replace(Options(), prefill=mode)


def test_a_colocated_chunk_is_the_engines_split_over_its_tp_group():
    """vLLM V1's 8,192-token max_num_batched_tokens (and SGLang's chunked_prefill_size) is one scheduler's,
    so a TP-4 instance prefills 2,048 tokens a GPU a step: a 30,000-token prompt takes ceil(30,000 / 8,192)
    = 4 chunks, and its TTFT before decode's stall is 4.5 steps of that chunk; with one attention group
    the run yields dec x (1 - share), share = out / osl / (prompts a second of a GPU doing only prefill)."""
    from moeserve.capacity.predict import ENGINE_CHUNK, Options, Predictor, Workload
    pred = Predictor(load_model("qwen3-235b-a22b"), load_hardware("b200"), Precision(weights="fp8", kv="fp8"))
    lay, w, o = Layout(4, 1, 0), Workload(30_000, 1000), Options(prefill="stalled")
    assert ENGINE_CHUNK == 8192
    got = pred.colocated(lay, 16, w, o)
    p = pred.prefill(lay, 2048, w, o)
    assert p.ttft_ms == pytest.approx(4.5 * p.step_ms)
    stalled = 1 - got.output_tokens_per_s_per_gpu / pred.decode(lay, 16, w, o).output_tokens_per_s_per_gpu
    assert got.ttft_ms == pytest.approx(p.ttft_ms / (1 - stalled))
    share = got.output_tokens_per_s_per_gpu / w.osl / (p.input_tokens_per_s_per_gpu / w.isl)
    assert stalled == pytest.approx(share, rel=1e-6)
    # a TP-8 instance of the same engine splits the same 8,192 tokens eight ways
    tp8 = pred.colocated(Layout(8, 1, 0), 8, w, o)
    p8 = pred.prefill(Layout(8, 1, 0), 1024, w, o)
    assert tp8.ttft_ms * (1 - (1 - tp8.output_tokens_per_s_per_gpu / pred.decode(Layout(8, 1, 0), 8, w, o)
                                .output_tokens_per_s_per_gpu)) == pytest.approx(p8.ttft_ms)


def test_separate_prefill_passes_follow_the_arrivals_of_a_closed_loop():
    """SGLang's scheduler (no mixed chunk) under a closed-loop load: a prefill pass of its own, eager, after
    a decode step with probability q = 1 - e^-a, a = sequences of the group / osl finishing a step, never
    after another pass. At a = ln 2 (q = 1/2, 2 ln 2 prompts a pass) one TP group's decode step costs
    D + P / 2: it yields dec x D / (D + P / 2), and a sequence waits D + P / 2 a token."""
    from moeserve.capacity.predict import Options, Predictor, Workload
    pred = Predictor(load_model("deepseek-r1"), load_hardware("b200"), Precision(weights="fp8"))
    lay, w = Layout(8, 1, 0), Workload(600, 1000)
    batch = 1000 * math.log(2) / 8  # a = batch x tp / osl = ln 2
    o = Options(prefill="separate")
    got = pred.colocated(lay, batch, w, o)
    d = pred.decode(lay, batch, w, o)
    p = pred.prefill(lay, 2 * math.log(2) * 600 / 8, w, replace(o, cuda_graphs=False))
    P, D = max(p.step_ms, d.step_ms), d.step_ms
    assert got.output_tokens_per_s_per_gpu == pytest.approx(d.output_tokens_per_s_per_gpu * D / (D + 0.5 * P))
    assert got.tpot_ms == pytest.approx(D + 0.5 * P)
    # fewer, longer passes than the chunked reading's 8,192-token chunks: the pass reads every weight again
    assert got.output_tokens_per_s_per_gpu < pred.colocated(lay, batch, w, Options()).output_tokens_per_s_per_gpu
    # a longer prompt makes a longer pass
    assert pred.colocated(lay, batch, Workload(6000, 1000), o).output_tokens_per_s_per_gpu < got.output_tokens_per_s_per_gpu


def test_compiled_separate_passes_cost_their_kernels_not_the_eager_host():
    """"separate-compiled" (ROCm ATOM's server) schedules the passes as "separate" does, but runs them as the
    decode steps run (CUDA graphs on: no eager host time), so at a = ln 2 a decode step costs D + P / 2 with P
    the graph-costed pass; short prompts make the eager pass host-bound, so the compiled one is far shorter;
    with --no-cuda-graphs both are eager and agree. A bench_run replay takes the same pass."""
    from moeserve.capacity import bench_run
    from moeserve.capacity.predict import Options, Predictor, Workload
    pred = Predictor(load_model("qwen3-235b-a22b"), load_hardware("mi355x"), Precision(weights="fp8", kv="fp8"))
    lay, w = Layout(8, 8, 0), Workload(1000, 1000)
    batch = 1000 * math.log(2) / 8  # a = ln 2: q = 1/2, 2 ln 2 prompts a pass
    o, eager_o = Options(prefill="separate-compiled"), Options(prefill="separate")
    d = pred.decode(lay, batch, w, o)
    pass_ms = pred.prefill(lay, 2 * math.log(2) * 1000 / 8, w, Options()).step_ms
    eager_ms = pred.prefill(lay, 2 * math.log(2) * 1000 / 8, w, Options(cuda_graphs=False)).step_ms
    got, eager = pred.colocated(lay, batch, w, o), pred.colocated(lay, batch, w, eager_o)
    D = d.step_ms
    assert got.tpot_ms == pytest.approx(D + 0.5 * max(pass_ms, D))
    assert got.output_tokens_per_s_per_gpu == pytest.approx(d.output_tokens_per_s_per_gpu * D / (D + 0.5 * max(pass_ms, D)))
    assert eager.tpot_ms == pytest.approx(D + 0.5 * max(eager_ms, D))
    assert eager_ms > 2 * pass_ms  # 1.4K tokens: the eager layer's host time, not their FLOPs, sets the pass
    no_graphs = pred.colocated(lay, batch, w, replace(o, cuda_graphs=False))
    assert no_graphs.tpot_ms == pytest.approx(pred.colocated(lay, batch, w, replace(eager_o, cuda_graphs=False)).tpot_ms)
    assert o.pass_options().cuda_graphs and not eager_o.pass_options().cuda_graphs
    steps = bench_run._Steps(pred, lay, w, o)
    assert steps.prefill(1024) * 1e3 == pytest.approx(pred.prefill(lay, 1024 / lay.gpus, w, Options(prefill="separate-compiled")).step_ms)


def test_separate_prefill_spreads_a_pass_over_the_groups_only_in_the_moe():
    """With attention groups (DP attention) the prefilling group's GPUs run attention and projections over
    its prompts, the routed experts take them over all groups' GPUs: the pass costs the local step with the
    experts and their communication of the spread one."""
    from moeserve.capacity.predict import Options, Predictor, Workload
    pred = Predictor(load_model("deepseek-r1"), load_hardware("h200"), Precision(weights="fp8"))
    lay, w = Layout(tp=1, ep=1, moe_tp=8), Workload(3200, 800)
    batch, o = 800 * math.log(2), Options(prefill="separate")  # a = ln 2 (q = 1/2) in each of the 8 groups
    eager = replace(o, cuda_graphs=False)
    local = pred.prefill(lay, 2 * math.log(2) * 3200, w, eager)
    spread = pred.prefill(lay, 2 * math.log(2) * 3200 / 8, w, eager)
    pass_ms = local.step_ms + sum(spread.breakdown_ms[k] - local.breakdown_ms[k] for k in ("experts", "communication"))
    d = pred.decode(lay, batch, w, o)
    busy = 1 - (2 / 3) ** 8  # a group prefills in 1/3 of its forwards (a pass after half its decode steps)
    forward = (1 - busy) * d.step_ms + busy * max(pass_ms, d.step_ms)
    got = pred.colocated(lay, batch, w, o)
    assert pass_ms < local.step_ms
    assert got.output_tokens_per_s_per_gpu == pytest.approx(d.output_tokens_per_s_per_gpu * d.step_ms * (2 / 3) / forward)


def test_nvfp4_experts_permute_and_dispatch_nvfp4_rows_by_hand():
    """NVFP4 experts are W4A4: tokens reach them in NVFP4 (0.5 + 1/16 bytes a value), not FP8 with per-128
    scales, both in the elementwise permutation and in the dispatch bytes."""
    m, b200 = load_model("deepseek-v3"), load_hardware("b200")
    s = StepInput("prefill", 1024, 512, 1)
    fp4, fp8_dispatch = Precision(weights="fp8", moe="fp4"), Precision(weights="fp8", moe="fp4", dispatch="fp8")
    lay = Layout(tp=1, ep=8)
    nvfp4, fp8 = StepModel(m, b200, lay, fp4, IDEAL), StepModel(m, b200, lay, fp8_dispatch, IDEAL)
    active, rows, _ = nvfp4.expert_rows(s)
    # the permutation in reads and writes H values a row in the dispatch format: 2 H (1 + 4/128 - 0.5625) bytes apart
    saved = active * rows * 2 * m.hidden * ((1 + 4 / 128) - (0.5 + 1 / 16)) / (b200.memory_bandwidth_gbs * 1e9)
    assert fp8.elementwise(s, True) - nvfp4.elementwise(s, True) == pytest.approx(saved)
    d4, d8 = comm.dispatch_and_combine(nvfp4, s)[0], comm.dispatch_and_combine(fp8, s)[0]
    assert d4 < d8
