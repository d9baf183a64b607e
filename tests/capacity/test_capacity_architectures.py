"""configure reads GLM-4.5 (glm4_moe), MiniMax-M2 and gpt-oss: parameter counts against the published sizes,
the layers each architecture's rule makes MoE, and gpt-oss's sliding-window layers (attention and KV) by hand."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from moeserve.capacity.hardware import load_hardware
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.memory import kv_bytes_per_token, memory_report
from moeserve.capacity.model_spec import from_hf_config, load_model
from moeserve.capacity.module_names import module_weights
from moeserve.capacity.step_time import StepInput, StepModel
from moeserve.cli import main


def shipped(name: str) -> dict:
    from moeserve.capacity.model_spec import config_path
    return json.loads(config_path(name)[0].read_text())


@pytest.mark.parametrize("name, total, active", [
    # model cards: GLM-4.5 355B total / 32B active, GLM-4.5-Air 106B / 12B (the decoder layers; their MTP layer
    # is counted apart), gpt-oss-120b 117B / 5.1B, gpt-oss-20b 21B / 3.6B, MiniMax-M2 230B / 10B
    ("glm-4.5", 355e9, 32e9), ("glm-4.5-air", 106e9, 12e9), ("gpt-oss-120b", 117e9, 5.1e9),
    ("gpt-oss-20b", 21e9, 3.6e9), ("minimax-m2", 230e9, 10e9)])
def test_parameter_counts_match_the_model_cards(name, total, active):
    m = load_model(name)
    assert m.total_params == pytest.approx(total, rel=0.02)
    assert m.active_params == pytest.approx(active, rel=0.07)


def test_glm_is_deepseeks_moe_under_gqa():
    m = load_model("glm-4.5")
    assert not m.is_mla and (m.num_heads, m.num_kv_heads, m.head_dim) == (96, 8, 128)
    # first_k_dense_replace 3: layers 0-2 dense (12,288 wide), 89 MoE layers of 160 experts + one shared expert
    assert (m.num_dense_layers, m.num_moe_layers, m.dense_intermediate) == (3, 89, 12288)
    assert (m.num_experts, m.top_k, m.shared_intermediate, m.mtp_layers) == (160, 8, 1536, 1)
    assert m.qk_norm and not load_model("glm-4.5-air").qk_norm  # use_qk_norm: true in 4.5, absent in Air
    # attention: q and o 96 heads, k and v 8 heads, of 128, from hidden 5,120
    assert m.attention_params == 5120 * 128 * (2 * 96 + 2 * 8)
    # KV: K and V, 8 heads of 128, 92 layers, bf16; TP 8 leaves one KV head a rank
    assert kv_bytes_per_token(m, Layout(), Precision(kv="bf16")) == 2 * 8 * 128 * 92 * 2
    assert kv_bytes_per_token(m, Layout(tp=8), Precision(kv="bf16")) == 2 * 1 * 128 * 92 * 2


def test_glm_checkpoint_names_are_deepseeks():
    cfg = shipped("glm-4.5")
    m = load_model("glm-4.5")
    names = module_weights(cfg, m, list(range(3, 92)))
    experts = [n for n, _ in names["experts"]]
    assert "model.layers.3.mlp.experts.0.gate_proj" in experts and "model.layers.2.mlp.experts.0.gate_proj" not in experts
    assert any(n == "model.layers.3.mlp.shared_experts.down_proj" for n, _ in names["dense"])
    assert names["mtp"][0][0].startswith("model.layers.92.")  # the MTP layer follows the 92 decoder layers


def test_minimax_m2_reads_qk_norm_and_no_shared_expert():
    m = load_model("minimax-m2")
    assert (m.num_moe_layers, m.num_experts, m.top_k, m.expert_intermediate) == (62, 256, 8, 1536)
    assert m.qk_norm and m.shared_intermediate == 0 and m.mtp_layers == 0 and m.sliding_layers == 0


def test_gpt_oss_alternates_full_and_sliding_window_layers():
    m = load_model("gpt-oss-120b")
    assert (m.num_layers, m.sliding_layers, m.sliding_window) == (36, 18, 128)
    assert m.attended(100) == 100  # inside the window every layer sees everything
    assert m.attended(8192) == (18 * 8192 + 18 * 128) / 36 == 4160
    # KV a token at 8,192-token sequences: K and V, 8 heads of 64, bf16, 18 full layers + 18 keeping 128 of 8,192
    assert kv_bytes_per_token(m, Layout(), Precision(kv="bf16"), 8192) == pytest.approx(2 * 8 * 64 * 2 * (18 + 18 * 128 / 8192))
    assert kv_bytes_per_token(m, Layout(), Precision(kv="bf16")) == 2 * 8 * 64 * 2 * 36  # no length: every layer
    # transformers' GptOssConfig defaults where config.json is silent; a null window makes every layer full
    cfg = {k: v for k, v in shipped("gpt-oss-20b").items() if k not in ("layer_types", "sliding_window")}
    d = from_hf_config(cfg)
    assert (d.sliding_layers, d.sliding_window) == (12, 128)
    assert from_hf_config(dict(cfg, sliding_window=None)).sliding_layers == 0
    with pytest.raises(ValueError, match="layer_types must list 24"):
        from_hf_config(dict(cfg, layer_types=["sliding_attention"] * 23))
    with pytest.raises(ValueError, match="layer_types"):
        from_hf_config(dict(cfg, layer_types=["local"] * 24))


def test_sliding_layers_halve_long_context_attention():
    m = load_model("gpt-oss-120b")
    full = replace(m, sliding_window=0, sliding_layers=0)
    h100, prec = load_hardware("h100"), Precision(weights="bf16", moe="fp4")
    for s in (StepInput("decode", 64, 32768, 64), StepInput("prefill", 8192, 32768, 1, prefix_tokens=32768)):
        ratio = StepModel(m, h100, Layout(), prec).attention_core(s) / StepModel(full, h100, Layout(), prec).attention_core(s)
        assert ratio == pytest.approx((18 * 32768 + 18 * 128) / (36 * 32768), rel=0.01)
    short = StepInput("decode", 64, 100, 64)
    assert StepModel(m, h100, Layout(), prec).attention_core(short) == StepModel(full, h100, Layout(), prec).attention_core(short)


def test_sliding_window_kv_lets_more_long_sequences_fit():
    m = load_model("gpt-oss-120b")
    prec = Precision(weights="bf16", moe="fp4", kv="bf16")
    long = memory_report(m, Layout(), prec, 80, tokens_per_step=1, kv_tokens_needed=64 * 32768, context=32768)
    every = memory_report(m, Layout(), prec, 80, tokens_per_step=1, kv_tokens_needed=64 * 32768)
    assert long.kv_needed == pytest.approx(every.kv_needed * (18 + 18 * 128 / 32768) / 36)
    assert long.kv_tokens > 1.9 * every.kv_tokens


@pytest.mark.parametrize("model", ["glm-4.5", "glm-4.5-air", "gpt-oss-120b", "minimax-m2"])
def test_configure_plans_the_new_shipped_models(model, capsys):
    assert main(["configure", "--model", model, "--hardware", "h200", "--phase", "decode", "--tp", "8", "--batch", "16",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == model and out["fits"] and out["output_tokens_per_s_per_gpu"] > 0


def test_mxfp4_weights_take_one_scale_byte_per_32_values():
    m = load_model("gpt-oss-120b")
    from moeserve.capacity.memory import weight_bytes
    mx = weight_bytes(m, Layout(), Precision(weights="bf16", moe="mxfp4"))
    nv = weight_bytes(m, Layout(), Precision(weights="bf16", moe="fp4"))
    # 128 experts x 3 x 2,880 x 2,880 weights x 36 layers, at 1/2 + 1/32 byte against NVFP4's 1/2 + 1/16
    assert nv - mx == pytest.approx(36 * 128 * 3 * 2880 * 2880 * (1 / 16 - 1 / 32))
    # gpt-oss's own checkpoint reads as MXFP4 experts, the rest in its BF16
    from moeserve.capacity.checkpoint_formats import checkpoint_formats
    cfg = dict(shipped("gpt-oss-120b"), quantization_config={"quant_method": "mxfp4"})
    f = checkpoint_formats(cfg, None, m)
    assert (f.attention, f.experts) == ("bf16", "mxfp4")


def test_fp4_weights_multiply_in_bf16_where_the_card_has_no_fp4_tensor_cores():
    h100, b200 = load_hardware("h100"), load_hardware("b200")
    assert h100.peak_flops("fp4") == h100.tflops["bf16"] * 1e12  # W4A16 on Hopper, not its FP8 peak
    assert b200.peak_flops("fp4") == b200.tflops["fp4"] * 1e12
    m = load_model("gpt-oss-120b")
    s = StepInput("prefill", 16384, 8192, 2)
    mx, bf = (StepModel(m, h100, Layout(), Precision(weights="bf16", moe=f)).experts(s) for f in ("mxfp4", "bf16"))
    assert mx == pytest.approx(bf, rel=0.01)  # compute-bound: the same BF16 FLOPs (its bytes are a quarter)


@pytest.mark.parametrize("flags, formats", [
    ([], ("bf16", "mxfp4", "bf16")),  # gpt-oss's only release: MXFP4 experts, BF16 elsewhere
    (["--weights", "fp8"], ("fp8", "fp8", "fp8")),  # --weights sets every module
    (["--attn-weights", "fp8"], ("fp8", "mxfp4", "bf16")),  # one module's flag leaves the rest the release's
])
def test_a_shipped_gpt_oss_plans_in_its_release_formats_unless_flags_say(flags, formats, capsys):
    assert main(["configure", "--model", "gpt-oss-120b", "--hardware", "b200", "--phase", "decode", "--tp", "1",
                 "--batch", "16", "--json", *flags]) == 0
    p = json.loads(capsys.readouterr().out)["precision"]
    assert (p["attention_weights"], p["moe_weights"], p["dense_weights"]) == formats
    main(["configure", "--model", "deepseek-v3", "--hardware", "b200", "--phase", "decode", "--tp", "8", "--batch",
          "16", "--json"])
    assert json.loads(capsys.readouterr().out)["precision"]["moe_weights"] == "fp8"  # the other shipped names: fp8


def test_emit_refuses_mxfp4_weights(tmp_path, capsys):
    argv = ["configure", "--model", "gpt-oss-20b", "--hardware", "h200", "--phase", "decode", "--batch", "8",
            "--moe-weights", "mxfp4", "--emit", str(tmp_path / "x.yaml")]
    assert main(argv) == 2
    assert "runs no FP4 weights" in capsys.readouterr().err and not (tmp_path / "x.yaml").exists()


def test_w4a16_fp4_gemms_pad_rows_to_marlins_blocks_not_the_cards_tiles():
    """FP4 weights on Hopper run W4A16 kernels, as int4 does: 40 rows a group compute Marlin's 48, not WGMMA's 64."""
    from moeserve.capacity.efficiency import DEFAULT
    from moeserve.capacity.gemm import kernel_share
    m, h100 = load_model("gpt-oss-120b"), load_hardware("h100")
    sm = StepModel(m, h100, Layout(), Precision(weights="bf16", moe="mxfp4"))
    params = 4e9  # large enough to be compute-bound at 48 rows in BF16
    flops = 2 * 48 * params / (h100.tflops["bf16"] * 1e12 * DEFAULT.gemm * kernel_share("hopper", 48, "fp4"))
    nbytes = (params * (0.5 + 1 / 32) + 2 * 40 * m.hidden * 2) / (h100.memory_bandwidth_gbs * 1e9 * DEFAULT.weight_stream)
    assert sm.gemm(40, params, "mxfp4") == pytest.approx(max(flops, nbytes))
    b200 = StepModel(m, load_hardware("b200"), Layout(), Precision(weights="bf16", moe="mxfp4"))
    assert b200.gemm(40, params, "mxfp4") == pytest.approx(b200.gemm(64, params, "mxfp4"), rel=0.05)  # FP4 tiles of 64


def test_mxfp4_experts_multiply_at_the_fp8_peak_on_a_card_with_fp4_tensor_cores():
    """W4A8: MXFP4 weights on Blackwell take MXFP8 activations (TensorRT-LLM's, FlashInfer's and AMD's gpt-oss MoE
    kernels), so a compute-bound GEMM runs at the FP8 peak, half NVFP4's (W4A4) on a B200; their tokens travel in
    FP8 (1 byte + a 4-byte scale a 128) unless --dispatch-dtype says otherwise."""
    from moeserve.capacity.efficiency import DEFAULT
    from moeserve.capacity.gemm import kernel_share
    from moeserve.capacity.predict import Predictor
    m, b200 = load_model("gpt-oss-120b"), load_hardware("b200")
    sm = StepModel(m, b200, Layout(), Precision(weights="bf16", moe="mxfp4"))
    params, rows = 4e9, 4096  # compute-bound in FP8 and in FP4
    flops = 2 * rows * params / (b200.tflops["fp8"] * 1e12 * DEFAULT.gemm * kernel_share("blackwell", rows, "fp8"))
    assert sm.gemm(rows, params, "mxfp4") == pytest.approx(flops)
    assert sm.gemm(rows, params, "fp4") == pytest.approx(flops * b200.tflops["fp8"] / b200.tflops["fp4"], rel=0.03)
    assert Predictor(m, b200, Precision(weights="bf16", moe="mxfp4")).prec.dispatch_bytes == pytest.approx(1 + 4 / 128)
    given = Predictor(m, b200, Precision(weights="bf16", moe="mxfp4", dispatch="bf16")).prec
    assert given.dispatch_bytes == 2.0
    hopper = Predictor(m, load_hardware("h200"), Precision(weights="bf16", moe="mxfp4")).prec
    assert hopper.dispatch_bytes == 2.0  # W4A16 there: the activations as they are


def test_a_disaggregated_prompt_moves_its_own_kv_a_sliding_layer_its_window():
    """P/D: the prompt's KV crosses to the decode side, isl tokens a full layer and the window a sliding one;
    gpt-oss-120b at 8 KV heads x 64 a layer in BF16: 2,048 bytes a token a layer."""
    from moeserve.capacity.predict import Options, Predictor, Workload

    m, h200 = load_model("gpt-oss-120b"), load_hardware("h200")
    pred = Predictor(m, h200, Precision(weights="bf16", moe="mxfp4", kv="bf16"))
    w, o = Workload(isl=1024, osl=4096), Options()
    pre, dec = pred.prefill(Layout(), 1024, w, o), pred.decode(Layout(), 64, w, o)
    split = pred.disaggregated(pre, dec, 2, w)
    moved = 2048 * (18 * 1024 + 18 * 128)
    assert split.ttft_ms - pre.ttft_ms == pytest.approx(moved / (h200.scaleout_gbs * 1e9) * 1e3)


def test_fp4_experts_take_bf16_tokens_where_the_card_has_no_fp4_tensor_cores(capsys):
    """W4A16 GEMMs take the activations as they are, so NVFP4 experts on Hopper get their tokens in BF16
    (2 bytes a value), on Blackwell in NVFP4 (0.5625); a --dispatch-dtype given wins on either."""
    from moeserve.capacity.predict import Predictor

    prec = Precision(weights="bf16", moe="fp4")
    assert Predictor(load_model("deepseek-v3"), load_hardware("h200"), prec).prec.dispatch_bytes == 2.0
    assert Predictor(load_model("deepseek-v3"), load_hardware("b200"), prec).prec.dispatch_bytes == 0.5 + 1 / 16
    told = Precision(weights="bf16", moe="fp4", dispatch="fp4")
    assert Predictor(load_model("deepseek-v3"), load_hardware("h200"), told).prec.dispatch_bytes == 0.5 + 1 / 16
    assert main(["configure", "--model", "deepseek-v3", "--hardware", "h200", "--phase", "decode", "--tp", "8",
                 "--batch", "16", "--moe-weights", "fp4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["precision"]["dispatch"] == "bf16"
