"""Tiny random-weight checkpoints of each supported architecture, for tests anywhere in the project.

    hf_model, model_dir = make_checkpoint("qwen3_moe", tmp_path)

The weights come from transformers' own initialisation under a fixed seed; the checkpoint is written
with `save_pretrained` (per-expert layout) or, with layout="fused", as the transformers in-memory
state dict (experts.gate_up_proj [E, 2I, H] / experts.down_proj [E, H, I]); layout="fused_t" writes
the transposed fused layout ([E, H, 2I] / [E, I, H]). gpt-oss's own layout is fused ([E, H, 2I], gate
and up interleaved; "fused_t" writes [E, 2I, H]); layout="mxfp4" writes its experts as the openai
releases do (`*_blocks` / `*_scales`, `quantization_config.quant_method: "mxfp4"`), and
`mxfp4_reference(dir)` is transformers' own model of such a checkpoint, dequantized. No tokenizer is
written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors.torch import save_file

# H = 64, I = 48 (2I != H so the fused orientation is unambiguous), 8 experts, top-2, 2 KV heads.
_COMMON = dict(
    vocab_size=96,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    initializer_range=0.07,
    num_experts_per_tok=2,
    tie_word_embeddings=False,
)

TINY_CONFIGS: dict[str, tuple[type, dict[str, Any]]] = {
    "mixtral": (
        transformers.MixtralConfig,
        dict(intermediate_size=48, num_hidden_layers=2, num_local_experts=8, rms_norm_eps=1e-5),
    ),
    "qwen2_moe": (
        transformers.Qwen2MoeConfig,
        # layer 1 is a dense MLP: 2 MoE layers (0 and 2) plus one dense layer
        dict(
            intermediate_size=80,
            moe_intermediate_size=48,
            shared_expert_intermediate_size=56,
            num_hidden_layers=3,
            mlp_only_layers=[1],
            num_experts=8,
            norm_topk_prob=False,
        ),
    ),
    "qwen3_moe": (
        transformers.Qwen3MoeConfig,
        dict(
            intermediate_size=80,
            moe_intermediate_size=48,
            num_hidden_layers=2,
            num_experts=8,
            head_dim=16,
            norm_topk_prob=True,
        ),
    ),
    "olmoe": (
        transformers.OlmoeConfig,
        dict(intermediate_size=48, num_hidden_layers=2, num_experts=8, clip_qkv=4.0, norm_topk_prob=False),
    ),
    # layer 0 slides over 5 positions (prompts are longer), layer 1 attends to all; YaRN rope without
    # truncation, as released (factor 4 here, for 256 positions); the SwiGLU clamp at 1.0 clamps some
    # activations; I = 96: three MXFP4 groups of 32, so --tp 2 cuts the down projection inside a group
    "gpt_oss": (
        transformers.GptOssConfig,
        dict(intermediate_size=96, num_hidden_layers=2, num_local_experts=8, head_dim=16, sliding_window=5,
             swiglu_limit=1.0, rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=4.0,
                                                    beta_fast=32.0, beta_slow=1.0, truncate=False,
                                                    original_max_position_embeddings=64)),
    ),
    # a dense first layer, then DeepSeek-V3 routing over 2 groups, a shared expert, qk-norm, q/k/v bias and
    # half the head rotated (partial_rotary_factor 0.5, the release's)
    "glm4_moe": (
        transformers.Glm4MoeConfig,
        dict(intermediate_size=80, moe_intermediate_size=48, num_hidden_layers=3, n_routed_experts=8,
             n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1, use_qk_norm=True,
             attention_bias=True, routed_scaling_factor=2.5),
    ),
    # q/k norm over all heads, 8 of the 16 head dims rotated
    "minimax_m2": (
        transformers.MiniMaxM2Config,
        dict(intermediate_size=48, num_hidden_layers=2, num_local_experts=8, head_dim=16, rotary_dim=8,
             bos_token_id=None, eos_token_id=None),
    ),
}
ARCHITECTURES = sorted(TINY_CONFIGS)


def _spread(*names: str, std: float):
    """A tweak that redraws the parameters or buffers named `names` (suffixes) with this std: transformers
    initialises them to zeros or tiny values, which would leave the feature they drive untested."""

    def tweak(model) -> None:
        with torch.no_grad():
            for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
                if name.endswith(names):
                    tensor.normal_(0.0, std)

    return tweak


# sinks large enough to take a visible share of the softmax; expert and router biases; correction biases
# that change which experts are chosen
TWEAKS = {
    "gpt_oss": _spread("self_attn.sinks", "router.bias", "gate_up_proj_bias", "down_proj_bias", std=0.5),
    "glm4_moe": _spread("e_score_correction_bias", std=0.1),
    "minimax_m2": _spread("e_score_correction_bias", std=0.1),
}


def tiny_config(arch: str, **overrides: Any):
    cls, kwargs = TINY_CONFIGS[arch]
    return cls(**(_COMMON | kwargs | overrides))


def make_hf_model(arch: str, seed: int = 0, **overrides: Any):
    torch.manual_seed(seed)
    config = tiny_config(arch, **overrides)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if arch in TWEAKS:
        TWEAKS[arch](model)
    return model.eval()


def save_checkpoint(model, path: Path, layout: str = "per_expert") -> Path:
    """Write `model` to `path` in one of the layouts: per_expert, fused, fused_t, mxfp4 (gpt-oss)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if layout == "per_expert":
        model.save_pretrained(path)
        return path
    if layout not in ("fused", "fused_t", "mxfp4"):
        raise ValueError(f"layout {layout!r} is not one of per_expert, fused, fused_t, mxfp4")
    model.config.architectures = [type(model).__name__]  # what save_pretrained records
    model.config.save_pretrained(path)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if layout == "mxfp4":
        state = _mxfp4_experts(state, path)
    if layout == "fused_t":
        state = {
            k: v.transpose(1, 2).contiguous() if k.endswith(("experts.gate_up_proj", "experts.down_proj")) else v
            for k, v in state.items()
        }
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    # two shards with an index, so the sharded-checkpoint path is exercised too
    names = sorted(state)
    half = len(names) // 2
    weight_map = {}
    for shard, part in (
        ("model-00001-of-00002.safetensors", names[:half]),
        ("model-00002-of-00002.safetensors", names[half:]),
    ):
        save_file({n: state[n] for n in part}, str(path / shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in part})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return path


def _mxfp4_experts(state: dict, path: Path) -> dict:
    """gpt-oss's expert weights ([E, in, out]) as MXFP4 blocks and scales of [E, out, in], as the openai
    releases store them, and quantization_config in config.json."""
    from moeserve.models import mxfp4

    out = {}
    for name, value in state.items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            out[f"{name}_blocks"], out[f"{name}_scales"] = mxfp4.quantize(value.transpose(1, 2))
        else:
            out[name] = value
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                   "lm_head"],
    }
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return out


def mxfp4_reference(path: Path):
    """transformers' own gpt-oss model of an MXFP4 checkpoint, dequantized (fp32): the oracle."""
    return transformers.AutoModelForCausalLM.from_pretrained(
        str(path), quantization_config=transformers.Mxfp4Config(dequantize=True), dtype=torch.float32).eval()


def make_checkpoint(arch: str, path: Path, layout: str = "per_expert", seed: int = 0, **overrides: Any):
    """(hf_model, checkpoint_dir) of a tiny random model of `arch` (one of ARCHITECTURES)."""
    model = make_hf_model(arch, seed, **overrides)
    return model, save_checkpoint(model, Path(path), layout)


# DeepSeek checkpoints come from test_deepseek_model (their configs and weight tweaks live there).
DEEPSEEK_CASES = {"deepseek_v2": "v2-groups", "deepseek_v3": "v3"}
ALL_ARCHITECTURES = ARCHITECTURES + sorted(DEEPSEEK_CASES)
# The quick run (`-m "not slow"`) checks these against transformers; the whole suite checks them all.
QUICK_ARCHITECTURES = ("mixtral", "olmoe")


def arch_params(names):
    """`names` as pytest parameters, those outside QUICK_ARCHITECTURES marked slow."""
    import pytest

    return [pytest.param(n, marks=() if n in QUICK_ARCHITECTURES else pytest.mark.slow) for n in names]


def hf_greedy(hf, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """transformers' greedy `generate` of each prompt alone, EOS off: the new token ids (the oracle)."""
    hf.generation_config.eos_token_id = None
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            gen = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
                              pad_token_id=0)
            out.append(gen[0, len(p):].tolist())
    return out


def make_any_checkpoint(arch: str, path: Path):
    """(hf_model, checkpoint_dir) for any name in ALL_ARCHITECTURES, or "gpt_oss-mxfp4" (gpt-oss with
    MXFP4 experts; hf_model is then transformers' dequantized load of it)."""
    if arch == "gpt_oss-mxfp4":
        path = save_checkpoint(make_hf_model("gpt_oss"), Path(path), layout="mxfp4")
        return mxfp4_reference(path), path
    if arch in DEEPSEEK_CASES:
        from test_deepseek_model import _make_checkpoint

        return _make_checkpoint(DEEPSEEK_CASES[arch], path), Path(path)
    return make_checkpoint(arch, path)
