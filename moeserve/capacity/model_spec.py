"""A model's shape, read from a Hugging Face config.json: what memory and step time depend on.

Architectures read: DeepSeek-V2/V3/R1 (MLA, shared experts, dense first layers, MTP layers),
Qwen3-MoE, Qwen2-MoE (one shared expert of its own width), Mixtral and OLMoE (GQA, no shared expert),
GLM-4.5/4.6/4.7 (GQA with DeepSeek-V3's MoE: dense first layers, a shared expert, an MTP layer),
MiniMax-M2 (GQA with q/k norm, no shared expert) and gpt-oss (GQA alternating full and 128-token
sliding-window layers, no shared expert). Parameter counts are per layer and exclude norms, biases and
gpt-oss's attention sinks (under 0.1% of the weights).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

_SHIPPED = Path(__file__).with_name("models")
MAX_CONFIG_BYTES = 16 << 20  # a config.json is a few KB
# every config.json field read here: (least, most). Far above any model (DeepSeek-V3: 61 layers, hidden 7168,
# 256 experts); a field outside is named before anything loops or divides by it (num_hidden_layers 10**12
# looped without end, num_attention_heads 0 divided by zero, "61" or 61.5 raised TypeError)
_SIZES = {
    "num_hidden_layers": (1, 4096), "hidden_size": (1, 1 << 20), "num_attention_heads": (1, 1 << 16),
    "vocab_size": (1, 1 << 24), "num_key_value_heads": (0, 1 << 16), "head_dim": (0, 1 << 16),
    "num_experts_per_tok": (1, 1 << 16), "n_routed_experts": (1, 1 << 16), "num_experts": (1, 1 << 16),
    "num_local_experts": (1, 1 << 16), "moe_intermediate_size": (1, 1 << 24), "intermediate_size": (0, 1 << 24),
    "shared_expert_intermediate_size": (0, 1 << 24), "n_shared_experts": (0, 1 << 16),
    "first_k_dense_replace": (0, 4096), "moe_layer_freq": (0, 4096), "decoder_sparse_step": (0, 4096),
    "q_lora_rank": (0, 1 << 20), "kv_lora_rank": (0, 1 << 20), "qk_nope_head_dim": (0, 1 << 16),
    "qk_rope_head_dim": (0, 1 << 16), "v_head_dim": (0, 1 << 16), "topk_group": (0, 1 << 16), "n_group": (0, 1 << 16),
    "num_nextn_predict_layers": (0, 64), "sliding_window": (0, 1 << 24),
}
# gpt-oss's layer_types entries, and its window where config.json leaves it out (transformers' GptOssConfig)
LAYER_TYPES = ("full_attention", "sliding_attention")
GPT_OSS_WINDOW = 128


@dataclass(frozen=True)
class ModelSpec:
    name: str
    hidden: int
    num_layers: int
    vocab: int
    num_heads: int
    num_kv_heads: int
    head_dim: int  # GQA: per-head width of q, k and v
    num_experts: int  # routed experts per MoE layer
    top_k: int
    expert_intermediate: int
    num_moe_layers: int  # the other layers have a dense MLP of dense_intermediate
    dense_intermediate: int = 0
    shared_intermediate: int = 0  # total width of the shared expert(s); 0 = none
    # MLA (DeepSeek): 0 kv_lora_rank means GQA
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_dim: int = 0
    qk_rope_dim: int = 0
    v_head_dim: int = 0
    topk_groups: int = 0  # group-limited routing: a token reaches experts of at most this many groups
    num_groups: int = 0
    mtp_layers: int = 0  # DeepSeek's multi-token-prediction modules (one decoder layer each)
    qk_norm: bool = False  # RMSNorm of queries and keys before RoPE (Qwen3-MoE's, OLMoE's, GLM's, MiniMax-M2's)
    tie_embeddings: bool = False
    # sliding-window attention (gpt-oss): `sliding_layers` of the layers attend to the last `sliding_window`
    # tokens only, and keep only those tokens' KV; 0 = every layer attends to the whole context
    sliding_window: int = 0
    sliding_layers: int = 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def attended(self, context: float) -> float:
        """Mean over the layers of the tokens a query attends to (and whose KV a sequence keeps) at `context`
        tokens: every layer the whole context, a sliding-window layer at most its window."""
        if not self.sliding_layers or context <= self.sliding_window:
            return context
        full = self.num_layers - self.sliding_layers
        return (full * context + self.sliding_layers * self.sliding_window) / self.num_layers

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    # --- parameters (counts, not bytes) ------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        """Projection weights of one attention layer (MLA: q down/up, kv down/up, output)."""
        h = self.hidden
        if self.is_mla:
            qk = self.qk_nope_dim + self.qk_rope_dim
            q = h * self.q_lora_rank + self.q_lora_rank * self.num_heads * qk if self.q_lora_rank else h * self.num_heads * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_dim) + self.kv_lora_rank * self.num_heads * (self.qk_nope_dim + self.v_head_dim)
            return q + kv + self.num_heads * self.v_head_dim * h
        return h * self.head_dim * (2 * self.num_heads + 2 * self.num_kv_heads)

    def mla_projections(self, tp: int) -> tuple[float, float, float, float, float]:
        """One MLA layer's projection weights on one rank of a TP group, kernel by kernel: the fused down
        projections (q_a, kv_a and the rope key, hidden -> q_lora + kv_lora + rope; without q_lora only
        kv_a), replicated on every rank (SGLang's `fused_qkv_a_proj_with_mqa` is a ReplicatedLinear,
        TensorRT-LLM's Fuse_A GEMM runs data-parallel: tech blog 1); then split over the heads the q
        projection (q_b, or q without q_lora), the k and v up-projections (kv_b) and o."""
        h, qk = self.hidden, self.qk_nope_dim + self.qk_rope_dim
        down = h * ((self.q_lora_rank or 0) + self.kv_lora_rank + self.qk_rope_dim)
        q = (self.q_lora_rank or h) * self.num_heads * qk
        k_up = self.kv_lora_rank * self.num_heads * self.qk_nope_dim
        v_up = self.kv_lora_rank * self.num_heads * self.v_head_dim
        o = self.num_heads * self.v_head_dim * h
        return down, q / tp, k_up / tp, v_up / tp, o / tp

    def attention_params_per_rank(self, tp: int) -> float:
        """Projection weights of one attention layer on one rank of a TP group (MLA: the down projections
        replicated, the rest split; GQA: all split)."""
        if self.is_mla:
            return sum(self.mla_projections(tp))
        return self.attention_params / tp

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden * self.expert_intermediate  # gate, up, down

    @property
    def shared_params(self) -> int:
        return 3 * self.hidden * self.shared_intermediate

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden * self.dense_intermediate

    @property
    def router_params(self) -> int:
        return self.hidden * self.num_experts

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tie_embeddings else 2)

    @property
    def total_params(self) -> int:
        per_moe = self.num_experts * self.expert_params + self.shared_params + self.router_params
        return (self.num_layers * self.attention_params + self.num_dense_layers * self.dense_mlp_params
                + self.num_moe_layers * per_moe + self.embedding_params)

    @property
    def active_params(self) -> int:
        """Weights one token multiplies (embedding lookup excluded, LM head included)."""
        per_moe = self.top_k * self.expert_params + self.shared_params + self.router_params
        return (self.num_layers * self.attention_params + self.num_dense_layers * self.dense_mlp_params
                + self.num_moe_layers * per_moe + self.vocab * self.hidden)

    # --- KV cache ------------------------------------------------------------------------------------
    @property
    def kv_values_per_token_layer(self) -> int:
        """Values cached per token and layer: MLA the latent + rope key, GQA 2 x kv heads x head dim."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_dim
        return 2 * self.num_kv_heads * self.head_dim

    # --- attention FLOPs per (query token, cached token) pair, one layer -----------------------------
    def attention_flops_per_pair(self, absorbed: bool) -> int:
        """2 x heads x (score width + value width). Absorbed MLA (decode) scores against the latent
        (kv_lora + rope) and sums latents (kv_lora); prefill MLA works on expanded heads."""
        if self.is_mla:
            if absorbed:
                return 2 * self.num_heads * (2 * self.kv_lora_rank + self.qk_rope_dim)
            return 2 * self.num_heads * (self.qk_nope_dim + self.qk_rope_dim + self.v_head_dim)
        return 2 * self.num_heads * 2 * self.head_dim


def moe_layer_indices(cfg: dict) -> list[int]:
    """The decoder layers (0-based) whose MLP is an MoE block, by the architecture's own rule (DeepSeek:
    first_k_dense_replace and moe_layer_freq; Qwen-MoE: decoder_sparse_step and mlp_only_layers; Mixtral
    and OLMoE: every layer; GLM-4.5: DeepSeek's first_k_dense_replace). `cfg` has passed _check_sizes."""
    layers, kind = cfg["num_hidden_layers"], cfg.get("model_type", "")
    if kind.startswith("deepseek") or kind == "glm4_moe" or "kv_lora_rank" in cfg:
        freq = cfg.get("moe_layer_freq", 1) or 1
        return [i for i in range(cfg.get("first_k_dense_replace", 0), layers) if i % freq == 0]
    if kind in ("qwen3_moe", "qwen2_moe"):
        step = cfg.get("decoder_sparse_step", 1) or 1
        only_mlp = set(cfg.get("mlp_only_layers") or [])
        return [i for i in range(layers) if i not in only_mlp and (i + 1) % step == 0]
    return list(range(layers))


def from_hf_config(cfg: dict, name: str = "model") -> ModelSpec:
    """ModelSpec from a config.json dict; raises ValueError for an architecture it cannot read."""
    spec = _spec(cfg, name)
    if spec.top_k > spec.num_experts:  # was planned as if each token ran more experts than there are
        raise ValueError(f"{name}: config.json num_experts_per_tok {spec.top_k} is more than its {spec.num_experts} "
                         "routed experts")
    return spec


def _spec(cfg: dict, name: str) -> ModelSpec:
    _check_sizes(cfg, name)
    kind = cfg.get("model_type", "")
    layers, hidden, heads = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    common = dict(name=name, hidden=hidden, num_layers=layers, vocab=cfg["vocab_size"], num_heads=heads,
                  num_kv_heads=cfg.get("num_key_value_heads") or heads,
                  head_dim=cfg.get("head_dim") or hidden // heads, top_k=cfg["num_experts_per_tok"],
                  tie_embeddings=bool(cfg.get("tie_word_embeddings", False)))
    if kind.startswith("deepseek") or "kv_lora_rank" in cfg:
        return ModelSpec(**common, num_experts=cfg["n_routed_experts"], expert_intermediate=cfg["moe_intermediate_size"],
                         num_moe_layers=len(moe_layer_indices(cfg)), dense_intermediate=cfg["intermediate_size"],
                         shared_intermediate=(cfg.get("n_shared_experts") or 0) * cfg["moe_intermediate_size"],
                         q_lora_rank=cfg.get("q_lora_rank") or 0, kv_lora_rank=cfg["kv_lora_rank"],
                         qk_nope_dim=cfg["qk_nope_head_dim"], qk_rope_dim=cfg["qk_rope_head_dim"],
                         v_head_dim=cfg["v_head_dim"], topk_groups=cfg.get("topk_group") or 0,
                         num_groups=cfg.get("n_group") or 0, mtp_layers=cfg.get("num_nextn_predict_layers") or 0)
    if kind in ("qwen3_moe", "qwen2_moe"):
        return ModelSpec(**common, num_experts=cfg["num_experts"], expert_intermediate=cfg["moe_intermediate_size"],
                         num_moe_layers=len(moe_layer_indices(cfg)), dense_intermediate=cfg.get("intermediate_size", 0),
                         shared_intermediate=cfg.get("shared_expert_intermediate_size", 0) if kind == "qwen2_moe" else 0,
                         qk_norm=kind == "qwen3_moe")
    if kind == "glm4_moe":  # DeepSeek-V3's MoE (dense first layers, shared experts, MTP) under GQA
        return ModelSpec(**common, num_experts=cfg["n_routed_experts"], expert_intermediate=cfg["moe_intermediate_size"],
                         num_moe_layers=len(moe_layer_indices(cfg)), dense_intermediate=cfg["intermediate_size"],
                         shared_intermediate=(cfg.get("n_shared_experts") or 0) * cfg["moe_intermediate_size"],
                         topk_groups=cfg.get("topk_group") or 0, num_groups=cfg.get("n_group") or 0,
                         mtp_layers=cfg.get("num_nextn_predict_layers") or 0, qk_norm=bool(cfg.get("use_qk_norm")))
    if kind == "minimax_m2":  # its MTP modules (use_mtp) are not in the released weights: none counted
        return ModelSpec(**common, num_experts=cfg["num_local_experts"], expert_intermediate=cfg["intermediate_size"],
                         num_moe_layers=layers, qk_norm=bool(cfg.get("use_qk_norm")))
    if kind == "gpt_oss":
        window, sliding = _sliding_layers(cfg, name)
        return ModelSpec(**common, num_experts=cfg["num_local_experts"], expert_intermediate=cfg["intermediate_size"],
                         num_moe_layers=layers, sliding_window=window, sliding_layers=sliding)
    if kind == "mixtral" or "num_local_experts" in cfg:
        return ModelSpec(**common, num_experts=cfg["num_local_experts"], expert_intermediate=cfg["intermediate_size"],
                         num_moe_layers=layers)
    if kind == "olmoe":
        return ModelSpec(**common, num_experts=cfg["num_experts"], expert_intermediate=cfg["intermediate_size"],
                         num_moe_layers=layers, qk_norm=True)
    raise ValueError(f"cannot read model_type {kind!r}: moeserve configure knows deepseek_v2/v3, qwen3_moe, "
                     "qwen2_moe, mixtral, olmoe, glm4_moe, minimax_m2 and gpt_oss")


def _sliding_layers(cfg: dict, name: str) -> tuple[int, int]:
    """(window, layers with sliding-window attention) of a gpt-oss config, where a field is absent as
    transformers' GptOssConfig defaults it: `sliding_window` 128, `layer_types` even layers sliding and odd
    ones full. A null or 0 sliding_window: every layer full."""
    window, layers = cfg.get("sliding_window", GPT_OSS_WINDOW) or 0, cfg["num_hidden_layers"]
    types = cfg.get("layer_types")
    if types is None:
        sliding = (layers + 1) // 2
    elif isinstance(types, list) and len(types) == layers and all(t in LAYER_TYPES for t in types):
        sliding = types.count("sliding_attention")
    else:
        raise ValueError(f"{name}: config.json layer_types must list {layers} of {', '.join(LAYER_TYPES)}")
    return (window, sliding) if window and sliding else (0, 0)


def _check_sizes(cfg: dict, name: str) -> None:
    """ValueError naming the first field of `cfg` that is not a whole number within _SIZES."""
    if not isinstance(cfg.get("model_type", ""), str):
        raise ValueError(f"{name}: config.json model_type must be a string")
    for key, (low, high) in _SIZES.items():
        value = cfg.get(key)
        if value is not None and (type(value) is not int or not low <= value <= high):
            raise ValueError(f"{name}: config.json {key} must be a whole number in [{low}, {high}], got {repr(value)[:40]}")
    only = cfg.get("mlp_only_layers")
    if only is not None and (not isinstance(only, list) or len(only) > 4096 or any(type(i) is not int for i in only)):
        raise ValueError(f"{name}: config.json mlp_only_layers must be a list of layer numbers")


def _builtin() -> ModelSpec:
    """The built-in model, from the config.json shipped with its weights."""
    from moeserve.builtin_model_info import BUILTIN_NAME, builtin_model_dir

    config = json.loads((builtin_model_dir() / "config.json").read_text())
    return from_hf_config(config, BUILTIN_NAME)


def shipped_models() -> list[str]:
    return sorted(p.stem for p in _SHIPPED.glob("*.json"))


def config_path(source: str) -> tuple[Path, bool]:
    """(the config.json --model names, whether it is a shipped model's): a checkpoint directory, a config.json
    path, or a shipped name (deepseek-v3, ...)."""
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    elif not path.exists() and (_SHIPPED / f"{source.lower()}.json").exists():
        return _SHIPPED / f"{source.lower()}.json", True
    if not path.exists():
        raise ValueError(f"--model {source}: no such directory, config.json or shipped model "
                         f"(shipped: {', '.join(shipped_models())})")
    return path, False


def read_json_object(path: Path, source: str, flag: str = "--model") -> dict:
    """The JSON object in `path` (at most MAX_CONFIG_BYTES, read no further); ValueError naming the file
    otherwise. `source` is the argument of `flag` the file belongs to."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:  # a directory, no read permission, an I/O error
        raise ValueError(f"{flag} {source}: cannot read {path}: {e.strerror or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ValueError(f"{flag} {source}: {path} is larger than {MAX_CONFIG_BYTES} bytes, no {path.name}")
    try:
        cfg = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:  # a binary file is no JSON either
        raise ValueError(f"{flag} {source}: {path} is not valid JSON: {e}") from None
    except RecursionError:
        raise ValueError(f"{flag} {source}: {path} nests too deep to be a {path.name}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{flag} {source}: {path} must hold a JSON object, got a JSON {type(cfg).__name__}")
    return cfg


def load_model(source: str | None) -> ModelSpec:
    """A checkpoint directory, a config.json path, a shipped name (deepseek-v3, ...), or None: the built-in model."""
    if source is None:
        return _builtin()
    path, shipped = config_path(source)
    cfg = read_json_object(path, source)
    try:
        name = path.stem if shipped else cfg.get("_name_or_path") or path.parent.name
        return from_hf_config(cfg, name)
    except KeyError as e:
        raise ValueError(f"--model {source}: config.json lacks {e.args[0]!r}") from None


def shipped_hub_id(source: str | None) -> str | None:
    """The Hugging Face repository of a shipped model name (deepseek-v3 -> deepseek-ai/DeepSeek-V3), else None."""
    if not source or Path(source).exists() or not (_SHIPPED / f"{source.lower()}.json").exists():
        return None
    return json.loads((_SHIPPED / f"{source.lower()}.json").read_text()).get("_hub_id")
