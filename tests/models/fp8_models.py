"""Tiny FP8 block-scaled checkpoints, made the way DeepSeek-V3 and Qwen3-*-FP8 are released: every
linear weight of attention, dense MLPs, shared and routed experts quantized to float8_e4m3fn per
128x128 block with its `weight_scale_inv` (amax / 448 per block); embeddings, norms, router gates,
DeepSeek's `e_score_correction_bias` and `lm_head` left as they are; `quantization_config` in
config.json.

    hf, path = make_fp8_checkpoint("deepseek_v3", tmp_path)

`hf` is the transformers model holding the DEQUANTIZED weights: the oracle an FP8 checkpoint is
served against. The sizes are not multiples of 128 (every scale grid has partial blocks) and a
--tp 2 cut runs through the middle of blocks (e.g. DeepSeek's kv_b_proj: 192 rows, rank 1 from
row 96; both models' expert intermediate 72 split at 36).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

BLOCK = (128, 128)
FP8_MAX = torch.finfo(torch.float8_e4m3fn).max
# weights an FP8 release quantizes (DeepSeek-V3's and Qwen3-FP8's choice); the rest stay plain
QUANTIZED = ("q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj",
             "gate_proj", "up_proj", "down_proj", "w1", "w2", "w3")
QUANT_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": list(BLOCK)}

FP8_CONFIGS = {
    # DeepSeek-V3: q LoRA 136 (2x2 blocks, both partial), kv_b_proj 4 x (24 + 24) = 192 rows, dense
    # layer 0 of 200, shared + 8 routed experts of 72, sigmoid routing with groups
    "deepseek_v3": (transformers.DeepseekV3Config, dict(
        vocab_size=96, hidden_size=144, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        q_lora_rank=136, kv_lora_rank=40, qk_nope_head_dim=24, qk_rope_head_dim=8, v_head_dim=24,
        intermediate_size=200, moe_intermediate_size=72, n_routed_experts=8, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1, routed_scaling_factor=2.5,
        norm_topk_prob=True, max_position_embeddings=128, initializer_range=0.07, tie_word_embeddings=False,
        rope_interleave=True)),
    # Qwen3-MoE: q_proj 4 x 40 = 160 rows (tp 2: 80 each, rank 1 inside block 0), k/v 2 x 40
    "qwen3_moe": (transformers.Qwen3MoeConfig, dict(
        vocab_size=96, hidden_size=144, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=40, intermediate_size=200, moe_intermediate_size=72, num_experts=8, num_experts_per_tok=2,
        norm_topk_prob=True, max_position_embeddings=128, initializer_range=0.07, tie_word_embeddings=False)),
    # the other architectures, single rank: the same reader and layers, their own names (Mixtral's w1/w2/w3)
    "mixtral": (transformers.MixtralConfig, dict(
        vocab_size=96, hidden_size=144, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=72, num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=128,
        initializer_range=0.07, tie_word_embeddings=False)),
    "qwen2_moe": (transformers.Qwen2MoeConfig, dict(
        vocab_size=96, hidden_size=144, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=200, moe_intermediate_size=72, shared_expert_intermediate_size=56, mlp_only_layers=[1],
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, max_position_embeddings=128,
        initializer_range=0.07, tie_word_embeddings=False)),
    "olmoe": (transformers.OlmoeConfig, dict(
        vocab_size=96, hidden_size=144, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=72, num_experts=8, num_experts_per_tok=2, clip_qkv=4.0, norm_topk_prob=False,
        max_position_embeddings=128, initializer_range=0.07, tie_word_embeddings=False)),
    # GLM-4.5-FP8 and MiniMax-M2 ship FP8 block-scaled: a dense layer, shared experts and DeepSeek-V3
    # routing; q/k norm over all heads and partial rotary
    "glm4_moe": (transformers.Glm4MoeConfig, dict(
        vocab_size=96, hidden_size=144, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=200, moe_intermediate_size=72, n_routed_experts=8, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1, use_qk_norm=True, attention_bias=True,
        max_position_embeddings=128, initializer_range=0.07, tie_word_embeddings=False)),
    "minimax_m2": (transformers.MiniMaxM2Config, dict(
        vocab_size=96, hidden_size=144, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=40, rotary_dim=20, intermediate_size=72, num_local_experts=8, num_experts_per_tok=2,
        max_position_embeddings=128, initializer_range=0.07, tie_word_embeddings=False, bos_token_id=None,
        eos_token_id=None)),
}


def quantize_blocks(w: torch.Tensor, block: tuple[int, int] = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """w [N, K] float -> (float8_e4m3fn [N, K], scale_inv float32 [ceil(N / bn), ceil(K / bk)]),
    w ~ q * scale_inv per block (the last row and column blocks partial)."""
    (n, k), (bn, bk) = w.shape, block
    rows, cols = math.ceil(n / bn), math.ceil(k / bk)
    padded = torch.zeros(rows * bn, cols * bk, dtype=torch.float32)
    padded[:n, :k] = w.float()
    tiles = padded.view(rows, bn, cols, bk)
    scale = tiles.abs().amax(dim=(1, 3)).clamp(min=1e-12) / FP8_MAX  # [rows, cols]
    q = (tiles / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(rows * bn, cols * bk)[:n, :k].contiguous(), scale.contiguous()


def dequantize_blocks(q: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int] = BLOCK) -> torch.Tensor:
    """The test's own dequantization (not moeserve's): each block times its scale, fp32."""
    (n, k), (bn, bk) = q.shape, block
    full = scale_inv.repeat_interleave(bn, 0).repeat_interleave(bk, 1)[:n, :k]
    return q.float() * full


def _quantized(name: str, tensor: torch.Tensor) -> bool:
    parts = name.split(".")
    return tensor.dim() == 2 and parts[-1] == "weight" and parts[-2] in QUANTIZED


def make_fp8_checkpoint(arch: str, path: Path, seed: int = 0, block: tuple[int, int] = BLOCK, **overrides):
    """(transformers model holding the dequantized weights, FP8 checkpoint dir `path`/fp8) of a tiny
    `arch` of FP8_CONFIGS; `path`/dequantized holds the oracle's weights as a plain checkpoint."""
    cls, kwargs = FP8_CONFIGS[arch]
    torch.manual_seed(seed)
    config = cls(**(kwargs | overrides))
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"  # transformers' grouped_mm rejects the unaligned tiny shapes
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1 and "norm" in pname:
                p.uniform_(0.6, 1.4)  # norms start at ones: make them matter
        for layer in model.model.layers:
            bias = getattr(getattr(layer.mlp, "gate", None), "e_score_correction_bias", None)
            if bias is not None:
                bias.normal_(0, 0.3)
    path = Path(path)
    plain, oracle = path / "plain", path / "dequantized"
    model.save_pretrained(plain)  # the on-disk (per-expert) names, as releases have them
    on_disk, dequantized = {}, {}
    for f in sorted(plain.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as sf:
            for name in sf.keys():
                tensor = sf.get_tensor(name)
                if _quantized(name, tensor):
                    q, scale_inv = quantize_blocks(tensor, block)
                    on_disk[name], on_disk[name + "_scale_inv"] = q, scale_inv
                    dequantized[name] = dequantize_blocks(q, scale_inv, block)
                else:
                    on_disk[name] = dequantized[name] = tensor
    assert any(re.search(r"experts\.0\.(gate_proj|w1)\.weight_scale_inv", n) for n in on_disk), "experts not quantized"
    model.save_pretrained(oracle)
    for f in oracle.glob("*.safetensors*"):
        f.unlink()
    save_file(dequantized, str(oracle / "model.safetensors"), metadata={"format": "pt"})
    ckpt = path / "fp8"
    ckpt.mkdir()
    (ckpt / "config.json").write_text((plain / "config.json").read_text())
    names = sorted(on_disk)  # two shards with an index, as releases are sharded
    half = len(names) // 2
    weight_map = {}
    for shard, part in (("model-00001-of-00002.safetensors", names[:half]),
                        ("model-00002-of-00002.safetensors", names[half:])):
        save_file({n: on_disk[n] for n in part}, str(ckpt / shard), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, shard))
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["quantization_config"] = QUANT_CONFIG | {"weight_block_size": list(block)}
    (ckpt / "config.json").write_text(json.dumps(cfg, indent=2))
    hf = transformers.AutoModelForCausalLM.from_pretrained(oracle, dtype=torch.float32)
    hf.config._attn_implementation = "eager"
    hf.config._experts_implementation = "eager"
    return hf.eval(), ckpt


def make_fp8_fused_checkpoint(arch: str, path: Path, block: tuple[int, int] = BLOCK):
    """As make_fp8_checkpoint, in the fused 3D expert layout (`experts.gate_up_proj` [E, 2I, H] and
    `experts.down_proj` [E, H, I], each expert's matrix quantized in blocks, scales
    [E, ceil(rows / bn), ceil(cols / bk)] beside them): (oracle holding these dequantized weights, dir)."""
    hf, plain = make_fp8_checkpoint(arch, path, block=block)
    on_disk = {}
    with torch.no_grad():
        for name, tensor in hf.state_dict().items():
            fused = name.endswith(("experts.gate_up_proj", "experts.down_proj"))
            if fused or _quantized(name, tensor):
                mats = [quantize_blocks(m, block) for m in (tensor if fused else tensor[None])]
                q, scale = torch.stack([m[0] for m in mats]), torch.stack([m[1] for m in mats])
                deq = torch.stack([dequantize_blocks(a, b, block) for a, b in mats])
                on_disk[name], on_disk[name + "_scale_inv"] = (q, scale) if fused else (q[0], scale[0])
                tensor.copy_(deq if fused else deq[0])  # state_dict tensors are the oracle's parameters
            else:
                on_disk[name] = tensor.clone()
    ckpt = Path(path) / "fp8_fused"
    ckpt.mkdir()
    (ckpt / "config.json").write_text((plain / "config.json").read_text())
    save_file(on_disk, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    return hf, ckpt
