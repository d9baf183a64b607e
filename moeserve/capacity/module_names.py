"""The Hugging Face module names of a model's linear layers, grouped as configure plans their formats, with
the weights each holds: what a checkpoint's exclude, ignore and targets lists are matched against
(checkpoint_formats.py).

Names follow the checkpoints: `model.layers.{i}.self_attn.{q_a_proj, q_b_proj, kv_a_proj_with_mqa,
kv_b_proj, o_proj}` (MLA) or `{q,k,v,o}_proj` (GQA); routed experts `model.layers.{i}.mlp.experts.{e}.
{gate,up,down}_proj` (Mixtral: `block_sparse_moe.experts.{e}.{w1,w2,w3}`; gpt-oss's fused `mlp.experts.*`
stand as `mlp.experts.{e}.*`); shared experts `mlp.shared_experts.*` (DeepSeek) or `mlp.shared_expert.*`
(Qwen2-MoE); a dense layer's MLP `mlp.{gate,up,down}_proj`; DeepSeek's MTP layers follow the decoder layers
(`model.layers.61.*` in DeepSeek-V3). Expert 0 stands for every expert of its layer (lists name experts by
layer, not one by one).
"""
from __future__ import annotations

from moeserve.capacity.model_spec import ModelSpec

MODULES = ("attention", "experts", "dense", "mtp")
GATED = ("gate_proj", "up_proj", "down_proj")


def _attention(model: ModelSpec) -> list[tuple[str, float]]:
    """(projection, weights) of one attention layer."""
    h, heads = model.hidden, model.num_heads
    if model.is_mla:
        qk = model.qk_nope_dim + model.qk_rope_dim
        q = ([("q_a_proj", h * model.q_lora_rank), ("q_b_proj", model.q_lora_rank * heads * qk)] if model.q_lora_rank
             else [("q_proj", h * heads * qk)])
        return q + [("kv_a_proj_with_mqa", h * (model.kv_lora_rank + model.qk_rope_dim)),
                    ("kv_b_proj", model.kv_lora_rank * heads * (model.qk_nope_dim + model.v_head_dim)),
                    ("o_proj", heads * model.v_head_dim * h)]
    d, kv = model.head_dim, model.num_kv_heads
    return [("q_proj", h * heads * d), ("k_proj", h * kv * d), ("v_proj", h * kv * d), ("o_proj", heads * d * h)]


def module_weights(cfg: dict, model: ModelSpec, moe_layers: list[int]) -> dict[str, list]:
    """{module: [(name, weights)]} over every decoder layer and MTP layer, for MODULES, and "mtp_roles":
    [(name, module)] of the MTP layers' projections with the main-model module each mirrors."""
    # Mixtral's block_sparse_moe; gpt-oss, read as Mixtral for its num_local_experts, names its experts mlp.experts
    mixtral = cfg.get("model_type") == "mixtral" or "num_local_experts" in cfg and cfg.get("model_type") != "gpt_oss"
    block, experts = ("block_sparse_moe", ("w1", "w3", "w2")) if mixtral else ("mlp", GATED)
    shared = "shared_expert" if cfg.get("model_type") == "qwen2_moe" else "shared_experts"
    attention = _attention(model)
    out: dict[str, list] = {m: [] for m in MODULES}
    out["mtp_roles"] = []
    moe = set(moe_layers)

    def layer(i: int, is_moe: bool) -> list[tuple[str, float, str]]:
        p = f"model.layers.{i}."
        rows = [(f"{p}self_attn.{s}", n, "attention") for s, n in attention]
        if is_moe:
            rows += [(f"{p}{block}.experts.0.{s}", model.expert_params / 3 * model.num_experts, "experts")
                     for s in experts]
            if model.shared_intermediate:
                rows += [(f"{p}mlp.{shared}.{s}", model.shared_params / 3, "dense") for s in GATED]
        elif model.dense_intermediate:
            rows += [(f"{p}mlp.{s}", model.dense_mlp_params / 3, "dense") for s in GATED]
        return rows

    for i in range(model.num_layers):
        for name, n, module in layer(i, i in moe):
            out[module].append((name, n))
    for i in range(model.num_layers, model.num_layers + model.mtp_layers):
        for name, n, module in layer(i, True):
            out["mtp"].append((name, n))
            out["mtp_roles"].append((name, module))
    return out
