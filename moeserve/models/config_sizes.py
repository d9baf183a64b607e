"""config.json's sizes checked against the tensors the checkpoint holds, before anything is allocated.

A config.json is a file anyone can edit: `num_hidden_layers: 10000000` grew an engine to 8.8 GB
before any weight was read, `vocab_size: 1e12` asked for 512 TB. Every size a model allocates from
is first checked to be a non-negative integer, then compared with the shape of a tensor that holds
it. The shapes come from the safetensors headers alone (no tensor data is read) and no torch is
imported, so `moeserve serve` and `LLM(...)` refuse such a checkpoint in well under a second, before
any rank starts (engine/layout_check.py), with one line naming the field and the tensor.

Every architecture moeserve serves names its tensors model.embed_tokens.weight and model.layers.N.*:
a directory without safetensors weights, without the embedding or without any tensor of a layer is
refused when config.json sizes the model by those fields (before, such a directory left every size
unchecked: num_hidden_layers 10000000 beside no weights grew the engine until memory ran out). Sizes
that other sizes are divided by (heads, experts per token, ...) must be at least 1.

What is compared (each only where the config sets the field and the checkpoint has the tensor, so an
architecture with other names is never refused for them):
- vocab_size, hidden_size: model.embed_tokens.weight [vocab_size, hidden_size];
- num_hidden_layers: the checkpoint must hold tensors of layers 0 .. num_hidden_layers - 1 (layers
  past it, as DeepSeek-V3's MTP layer, are allowed);
- the routed-expert count (n_routed_experts, num_experts or num_local_experts): the rows of the
  first router weight ({mlp, block_sparse_moe}.gate.weight [E, H]); num_experts_per_tok <= it;
- the experts' intermediate size (moe_intermediate_size, else intermediate_size): rows of
  experts.0.gate_proj / w1; intermediate_size: rows of a dense layer's mlp.gate_proj; the shared
  experts' rows (Qwen2-MoE's shared_expert_intermediate_size, DeepSeek's n_shared_experts x
  moe_intermediate_size);
- attention: q_proj / k_proj rows = heads x head_dim (Llama-style); for MLA (kv_lora_rank set),
  q_a_proj, q_b_proj or q_proj, kv_a_proj_with_mqa and kv_b_proj rows from the MLA sizes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from moeserve.errors import ConfigError

# fields a model's tensors are sized from: non-negative integers when config.json sets them
SIZE_FIELDS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size", "num_experts",
    "n_routed_experts", "num_local_experts", "num_experts_per_tok", "n_shared_experts", "first_k_dense_replace",
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "max_position_embeddings",
)
EXPERT_COUNT_FIELDS = ("n_routed_experts", "num_experts", "num_local_experts")
# divisors of other sizes, or counts a model needs one of: at least 1 when set (0 raised ZeroDivisionError
# or ValueError inside the engine, or served a top-0 MoE)
POSITIVE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                   "num_experts_per_tok", *EXPERT_COUNT_FIELDS)
EMBEDDING = "model.embed_tokens.weight"
_LAYER = re.compile(r"model\.layers\.(\d+)\.")
_ROUTER = re.compile(r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.gate\.weight")
_EXPERT0 = re.compile(r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.0\.(?:gate_proj|w1)\.weight")
_DENSE = re.compile(r"model\.layers\.(\d+)\.mlp\.gate_proj\.weight")
_QWEN_SHARED = re.compile(r"model\.layers\.(\d+)\.mlp\.shared_expert\.gate_proj\.weight")
_DEEPSEEK_SHARED = re.compile(r"model\.layers\.(\d+)\.mlp\.shared_experts\.gate_proj\.weight")


def tensor_shapes(model_dir: str | Path) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} from the headers of the checkpoint's safetensors files ({} when there are
    none: the loader then says what is missing)."""
    from safetensors import safe_open

    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    try:
        files = sorted({model_dir / f for f in json.loads(index.read_text())["weight_map"].values()}) \
            if index.exists() else sorted(model_dir.glob("*.safetensors"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}  # an unreadable index: the loader names it
    shapes: dict[str, tuple[int, ...]] = {}
    for path in files:
        try:
            with safe_open(str(path), framework="numpy") as f:
                shapes.update({name: tuple(f.get_slice(name).get_shape()) for name in f.keys()})
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error types for a bad header
            raise ConfigError(f"cannot read the safetensors header of {path}: {e}") from None
    return shapes


def check_config_sizes(model_dir: str | Path, fields: Any, shapes: dict[str, tuple[int, ...]] | None = None) -> None:
    """ConfigError (one line, naming the config.json field and the tensor) when a size of `fields`
    (config.json as attributes) is not a non-negative integer or disagrees with the checkpoint."""
    where = f"{Path(model_dir) / 'config.json'}"
    for name in SIZE_FIELDS:
        value = getattr(fields, name, None)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ConfigError(f"{where}: {name} must be a non-negative integer, got {_short(value)}")
        if name in POSITIVE_FIELDS and value == 0:
            raise ConfigError(f"{where}: {name} must be at least 1, got 0")
    shapes = tensor_shapes(model_dir) if shapes is None else shapes
    if not shapes:
        raise ConfigError(f"{where}: no *.safetensors weights beside it to check its sizes against (moeserve "
                          "loads safetensors checkpoints)")
    for problem in (_embedding, _layers, _experts, _mlp_rows, _attention):
        message = problem(fields, shapes)
        if message:
            raise ConfigError(f"{where}: {message}")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _mismatch(field: str, value: int, tensor: str, shape: tuple[int, ...], what: str) -> str:
    return f"{field} {value} does not match the checkpoint's {tensor} {list(shape)} ({what})"


def _embedding(cfg: Any, shapes: dict) -> str | None:
    shape = shapes.get(EMBEDDING)
    sized = [f for f in ("vocab_size", "hidden_size") if getattr(cfg, f, None) is not None]
    if sized and (shape is None or len(shape) != 2):
        return (f"{' and '.join(sized)} cannot be checked: the checkpoint has no {EMBEDDING} [vocab_size, "
                f"hidden_size]{'' if shape is None else f' (it is {list(shape)})'}")
    if shape is None:
        return None
    for field, dim in (("vocab_size", 0), ("hidden_size", 1)):
        value = getattr(cfg, field, None)
        if value is not None and value != shape[dim]:
            return _mismatch(field, value, "model.embed_tokens.weight", shape, "[vocab_size, hidden_size]")
    return None


def _layers(cfg: Any, shapes: dict) -> str | None:
    layers = getattr(cfg, "num_hidden_layers", None)
    present = {int(m.group(1)) for n in shapes if (m := _LAYER.match(n))}
    if not layers:
        return None
    if not present:
        return (f"num_hidden_layers {layers} cannot be checked: the checkpoint has no tensor of any layer "
                "(model.layers.N.*)")
    missing = next((i for i in range(layers) if i not in present), None)  # stops at max(present) + 1 at most
    if missing is None:
        return None
    return (f"num_hidden_layers {layers} does not match the checkpoint: it has no tensor of layer {missing} "
            f"(model.layers.{missing}.*; it holds layers {min(present)}-{max(present)})")


def _first(pattern: re.Pattern, shapes: dict) -> tuple[str, tuple[int, ...]] | None:
    found = sorted((int(m.group(1)), n) for n in shapes if (m := pattern.fullmatch(n)) and len(shapes[n]) >= 2)
    return (found[0][1], shapes[found[0][1]]) if found else None


def _experts(cfg: Any, shapes: dict) -> str | None:
    field = next((f for f in EXPERT_COUNT_FIELDS if getattr(cfg, f, None) is not None), None)
    router = _first(_ROUTER, shapes)
    if field is None:
        return None
    count = getattr(cfg, field)
    if router is not None and router[1][0] != count:
        return _mismatch(field, count, router[0], router[1], "[experts, hidden_size]")
    top_k = getattr(cfg, "num_experts_per_tok", None)
    if top_k is not None and count and top_k > count:
        return f"num_experts_per_tok {top_k} is more than the {count} experts ({field})"
    return None


def _mlp_rows(cfg: Any, shapes: dict) -> str | None:
    expert_field = "moe_intermediate_size" if getattr(cfg, "moe_intermediate_size", None) is not None \
        else "intermediate_size"
    for pattern, field in ((_EXPERT0, expert_field), (_DENSE, "intermediate_size"),
                           (_QWEN_SHARED, "shared_expert_intermediate_size")):
        found, value = _first(pattern, shapes), getattr(cfg, field, None)
        if found is not None and value is not None and found[1][0] != value:
            return _mismatch(field, value, found[0], found[1], f"rows = {field}")
    shared, rows = getattr(cfg, "n_shared_experts", None), getattr(cfg, "moe_intermediate_size", None)
    found = _first(_DEEPSEEK_SHARED, shapes)
    if found is not None and shared is not None and rows is not None and found[1][0] != shared * rows:
        return _mismatch("n_shared_experts", shared, found[0], found[1],
                         f"rows = n_shared_experts x moe_intermediate_size = {shared * rows}")
    return None


def _attention(cfg: Any, shapes: dict) -> str | None:
    layer = min((int(m.group(1)) for n in shapes if (m := _LAYER.match(n))), default=0)
    prefix = f"model.layers.{layer}.self_attn"
    heads = getattr(cfg, "num_attention_heads", None)
    if heads is None:
        return None
    if getattr(cfg, "kv_lora_rank", None) is not None:  # MLA (DeepSeek)
        nope, rope, v = (getattr(cfg, f, None) or 0 for f in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
        expected = [("q_a_proj", getattr(cfg, "q_lora_rank", None), "q_lora_rank"),
                    ("q_b_proj", heads * (nope + rope), "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim)"),
                    ("q_proj", heads * (nope + rope), "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim)"),
                    ("kv_a_proj_with_mqa", cfg.kv_lora_rank + rope, "kv_lora_rank + qk_rope_head_dim"),
                    ("kv_b_proj", heads * (nope + v), "num_attention_heads x (qk_nope_head_dim + v_head_dim)")]
    else:
        hidden = getattr(cfg, "hidden_size", None)
        head_dim = getattr(cfg, "head_dim", None) or (hidden // heads if hidden and heads else None)
        if head_dim is None:
            return None
        kv = getattr(cfg, "num_key_value_heads", None) or heads
        expected = [("q_proj", heads * head_dim, "num_attention_heads x head_dim"),
                    ("k_proj", kv * head_dim, "num_key_value_heads x head_dim")]
    for proj, rows, what in expected:
        name = f"{prefix}.{proj}.weight"
        shape = shapes.get(name)
        if rows is not None and shape is not None and len(shape) == 2 and shape[0] != rows:
            field = what.split(" ")[0]
            return _mismatch(field, getattr(cfg, field), name, shape, f"rows = {what} = {rows}")
    return None
