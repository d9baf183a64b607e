"""The sizes of a model that a parallel layout cuts, and the one check that they cut evenly.

Torch-free, so it runs on config.json alone in the process that reads the flags
(engine/startup_checks.py: `moeserve serve` and `LLM(...)` fail before any rank starts) and on the
loaded config in every rank before the model is built (`ModelRunner`: a world started by torchrun
fails with the same message). The layers keep their own checks for code that builds them directly.

What a layout cuts (docs/models.md, "Parallel layout inside the model"):
- query heads over --tp; KV heads over --tp, or, when there are fewer KV heads than TP ranks, each is
  replicated on tp / kv_heads ranks, so --tp must then be a multiple of them;
- routed experts over --ep when --ep > 1: one slot per expert, or, with a --placement plan, the
  plan's slots (its replicas let experts that do not split over --ep be served: 6 experts and 2
  replicas make 8 slots for --ep 4), after the plan is checked against the model (`with_plan`);
- each routed expert along its intermediate size over --tp when --ep is 1 (whole experts otherwise);
- shared experts and dense MLP layers along their intermediate size over --tp, at any --ep.

Each architecture lists its cuts from its config here (`models/registry.py` maps the architecture
name to them); a config object needs only attribute access, so a transformers config and a
`SimpleNamespace` of config.json both serve. A size the config does not give is not checked here
(transformers fills in its default later, and the rank checks that).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moeserve.errors import ConfigError

# what a Cut splits
HEADS = "heads"  # over --tp
KV_HEADS = "kv_heads"  # over --tp, or replicated when fewer than --tp
EXPERTS = "experts"  # over --ep when --ep > 1
EXPERT_ROWS = "expert_rows"  # over --tp when --ep is 1
MLP_ROWS = "mlp_rows"  # over --tp at any --ep


@dataclass(frozen=True)
class Cut:
    """`field` (named as config.json names it; a product shows its factors) has value `size` and is
    split as `kind` says; `part` names what is split, for the message."""

    kind: str
    field: str
    size: int
    part: str


def misfit(cut: Cut, tp: int, ep: int) -> str | None:
    """Why `cut` does not split over --tp `tp` / --ep `ep` (what to change), or None when it does."""
    name = f"{cut.field} {cut.size}"
    if cut.kind == EXPERTS:
        if ep > 1 and cut.size % ep:
            more = -cut.size % ep  # replicas that make the slots a multiple of --ep
            return (f"{name} is not a multiple of --ep {ep}: every expert rank holds the same number of "
                    f"{cut.part}; use an --ep that divides {cut.size}, or serve a --placement plan with "
                    f"{more} more slot(s) for replicas of hot experts (moeserve place --ep {ep} "
                    f"--redundant {more} ...)")
        return None
    if cut.kind == EXPERT_ROWS:
        if ep == 1 and cut.size % tp:
            return (f"{name} is not a multiple of --tp {tp}: with --ep 1 each routed expert is split over the "
                    f"TP ranks along its intermediate size; use a --tp that divides {cut.size}, or an --ep that "
                    "is a multiple of --tp (whole experts per rank)")
        return None
    if cut.kind == KV_HEADS:
        if cut.size % tp if cut.size >= tp else tp % cut.size:
            return (f"{name} does not split over --tp {tp}: the TP ranks share the KV heads evenly, or, when "
                    f"there are fewer KV heads than TP ranks, replicate each on the same number of ranks; "
                    f"use a --tp that divides {cut.size} or is a multiple of it")
        return None
    if cut.size % tp:
        how = " along their intermediate size, at any --ep" if cut.kind == MLP_ROWS else ""
        return (f"{name} is not a multiple of --tp {tp}: the {cut.part} are split over the TP ranks{how}; "
                f"use a --tp that divides {cut.size}")
    return None


def with_plan(cuts: list[Cut], plan: Any, ep: int, where: str, moe_layers: int | None = None) -> list[Cut]:
    """The cuts with a placement plan's slots for the routed experts, once the plan is found to fit:
    as many experts as the model routes to, as many MoE layers (`moe_layers`, when config.json says),
    and --ep ranks. `plan` needs num_experts, num_layers, num_slots and num_ranks (placement/plan.py);
    `where` names it in the message. A plan for 5 experts on a model with 6 was accepted and failed
    the first request, the engine dead; one for 3 MoE layers on a model with 2 failed in the engine."""
    problems = [f"{where} is for {plan.num_experts} experts; this model has {c.field} {c.size}"
                for c in cuts if c.kind == EXPERTS and c.size != plan.num_experts]
    if moe_layers is not None and plan.num_layers != moe_layers:
        problems.append(f"{where} places {plan.num_layers} MoE layers; this model has {moe_layers}")
    if plan.num_ranks != ep:
        problems.append(f"{where} places experts on {plan.num_ranks} ranks; this layout has --ep {ep}")
    if problems:
        raise ConfigError("; ".join(problems) + ": plan again with `moeserve place` for this model and --ep")
    return [Cut(EXPERTS, f"{where}'s slots", plan.num_slots, "expert slots") if c.kind == EXPERTS else c
            for c in cuts]


def check_cuts(cuts: list[Cut], tp: int, ep: int) -> None:
    """Raises ConfigError naming every cut that does not split over --tp / --ep."""
    problems = [p for p in (misfit(c, tp, ep) for c in cuts) if p]
    if problems:
        raise ConfigError("; ".join(problems))


# --- which layers are MoE (the adapters build their layers from these) ---------------------------
def every_layer(cfg: Any, i: int) -> bool:
    """Mixtral, OLMoE: every decoder layer is MoE."""
    return True


def qwen_moe_layer(cfg: Any, i: int) -> bool:
    """Qwen2/3-MoE: MoE unless listed in mlp_only_layers or off every decoder_sparse_step-th layer."""
    mlp_only = getattr(cfg, "mlp_only_layers", None) or []
    step = getattr(cfg, "decoder_sparse_step", 1) or 1
    return i not in mlp_only and (_value(cfg, "num_experts", "num_local_experts")[1] or 0) > 0 and (i + 1) % step == 0


def deepseek_moe_layer(cfg: Any, i: int) -> bool:
    """DeepSeek-V2/V3: MoE from layer first_k_dense_replace on, every moe_layer_freq-th layer."""
    freq = getattr(cfg, "moe_layer_freq", 1) or 1
    first_dense = getattr(cfg, "first_k_dense_replace", 0) or 0
    return bool(getattr(cfg, "n_routed_experts", 0)) and i >= first_dense and i % freq == 0


def glm4_moe_layer(cfg: Any, i: int) -> bool:
    """GLM-4.5: MoE from layer first_k_dense_replace on (every layer after it)."""
    first_dense = getattr(cfg, "first_k_dense_replace", 0) or 0
    return bool(_value(cfg, "n_routed_experts", "num_local_experts")[1]) and i >= first_dense


# --- the cuts of each architecture -----------------------------------------------------------------
def mixtral_cuts(cfg: Any) -> list[Cut]:
    """Every layer MoE, no shared expert."""
    return _gqa(cfg) + _cuts(
        cfg, (EXPERTS, "routed experts", "num_local_experts", "num_experts"),
        (EXPERT_ROWS, "routed experts", "intermediate_size"))


def olmoe_cuts(cfg: Any) -> list[Cut]:
    """Every layer MoE, no shared expert."""
    return _gqa(cfg) + _cuts(
        cfg, (EXPERTS, "routed experts", "num_experts", "num_local_experts"),
        (EXPERT_ROWS, "routed experts", "intermediate_size"))


def qwen3_moe_cuts(cfg: Any) -> list[Cut]:
    moe = [qwen_moe_layer(cfg, i) for i in range(getattr(cfg, "num_hidden_layers", 0) or 0)]
    cuts = _gqa(cfg)
    if any(moe):
        cuts += _cuts(cfg, (EXPERTS, "routed experts", "num_experts", "num_local_experts"),
                      (EXPERT_ROWS, "routed experts", "moe_intermediate_size"))
    if not all(moe):
        cuts += _cuts(cfg, (MLP_ROWS, "dense MLP layers", "intermediate_size"))
    return cuts


def qwen2_moe_cuts(cfg: Any) -> list[Cut]:
    """Qwen3-MoE's, plus the shared expert (absent at size 0)."""
    cuts = qwen3_moe_cuts(cfg)
    if any(qwen_moe_layer(cfg, i) for i in range(getattr(cfg, "num_hidden_layers", 0) or 0)):
        cuts += _cuts(cfg, (MLP_ROWS, "shared experts", "shared_expert_intermediate_size"))
    return cuts


def deepseek_cuts(cfg: Any) -> list[Cut]:
    """MLA splits its query heads only (one latent KV, on every rank); the shared experts are one
    MLP of n_shared_experts x moe_intermediate_size."""
    moe = [deepseek_moe_layer(cfg, i) for i in range(getattr(cfg, "num_hidden_layers", 0) or 0)]
    return _cuts(cfg, (HEADS, "attention heads", "num_attention_heads")) + _deepseek_moe_cuts(cfg, moe, "n_routed_experts")


def gpt_oss_cuts(cfg: Any) -> list[Cut]:
    """Every layer MoE, no shared expert (the MXFP4 down projection's 32-column groups may be cut
    anywhere: a rank reads the groups holding its columns, models/mxfp4.py)."""
    return _gqa(cfg) + _cuts(
        cfg, (EXPERTS, "routed experts", "num_local_experts", "num_experts"),
        (EXPERT_ROWS, "routed experts", "intermediate_size"))


def minimax_m2_cuts(cfg: Any) -> list[Cut]:
    """Every layer MoE, no shared expert."""
    return gpt_oss_cuts(cfg)


def glm4_moe_cuts(cfg: Any) -> list[Cut]:
    """DeepSeek's MoE over GQA attention: shared experts as one MLP of n_shared_experts x
    moe_intermediate_size, dense layers before first_k_dense_replace."""
    moe = [glm4_moe_layer(cfg, i) for i in range(getattr(cfg, "num_hidden_layers", 0) or 0)]
    return _gqa(cfg) + _deepseek_moe_cuts(cfg, moe, "n_routed_experts", "num_local_experts")


def _deepseek_moe_cuts(cfg: Any, moe: list[bool], *expert_fields: str) -> list[Cut]:
    """DeepSeek's MoE block (models/deepseek_moe.py) over the layers `moe` marks: routed experts, the shared
    experts as one MLP of n_shared_experts x moe_intermediate_size, and the dense MLP of the other layers."""
    cuts = []
    if any(moe):
        cuts += _cuts(cfg, (EXPERTS, "routed experts", *expert_fields),
                      (EXPERT_ROWS, "routed experts", "moe_intermediate_size"))
        shared, rows = getattr(cfg, "n_shared_experts", None), getattr(cfg, "moe_intermediate_size", None)
        if shared and rows:
            cuts.append(Cut(MLP_ROWS, f"n_shared_experts {shared} x moe_intermediate_size {rows} =", shared * rows,
                            "shared experts"))
    if not all(moe):
        cuts += _cuts(cfg, (MLP_ROWS, "dense MLP layers", "intermediate_size"))
    return cuts


def _gqa(cfg: Any) -> list[Cut]:
    return _cuts(cfg, (HEADS, "attention heads", "num_attention_heads"), (KV_HEADS, "KV heads", "num_key_value_heads"))


def _cuts(cfg: Any, *specs: tuple[str, ...]) -> list[Cut]:
    """One Cut per (kind, part, field, *aliases) whose field (or an alias) the config gives as a positive size."""
    out = []
    for kind, part, *names in specs:
        field, size = _value(cfg, *names)
        if isinstance(size, int) and size > 0:
            out.append(Cut(kind, field, size, part))
    return out


def _value(cfg: Any, *names: str) -> tuple[str, Any]:
    """(name, value) of the first of `names` the config sets (transformers renames some fields:
    Qwen3-MoE writes num_local_experts for num_experts); (names[0], None) when none is set."""
    for name in names:
        value = getattr(cfg, name, None)
        if value is not None:
            return name, value
    return names[0], None
