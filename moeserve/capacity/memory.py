"""The fit calculator: memory per GPU of a deployment, and how many KV tokens fit beside the weights.

All sizes in bytes per GPU. KV per token: MLA keeps one latent + rope key per layer (kv_lora_rank +
qk_rope_dim values), replicated on every TP rank of a group; GQA keeps 2 x kv_heads x head_dim values
per layer, split over TP ranks by KV head (a rank holds at least one head).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from moeserve.capacity.draft_head import DraftHead
from moeserve.capacity.dtypes import nbytes
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.model_spec import ModelSpec

GB = 1e9
# DeepEP's normal-mode kernels move big batches in chunks through fixed buffers (1 GB NVLink + 1 GB
# RDMA by default), so a prefill step's dispatch memory stops growing there
DISPATCH_BUFFER_CAP = 2 * GB


@dataclass(frozen=True)
class MemoryReport:
    weights: float
    kv_per_token: float  # bytes one token's KV takes on one GPU (all layers)
    kv_tokens: int  # tokens the KV space of one GPU holds
    kv_needed: float  # bytes of KV the workload keeps on one GPU
    activations: float
    dispatch_buffers: float
    budget: float  # memory_fraction x HBM
    mla: bool = False
    host_weights: float = 0.0  # routed experts offloaded to host memory, per GPU
    host_budget: float = 0.0  # memory_fraction x host memory per GPU
    offloaded_layers: int = 0  # MoE layers whose routed experts live in host memory

    @property
    def total(self) -> float:
        return self.weights + self.kv_needed + self.activations + self.dispatch_buffers

    @property
    def fits(self) -> bool:
        return self.total <= self.budget and self.host_weights <= self.host_budget

    def as_dict(self) -> dict:
        return {"weights_gb": self.weights / GB, "kv_gb": self.kv_needed / GB, "kv_bytes_per_token": self.kv_per_token,
                "kv_tokens_capacity": self.kv_tokens, "activations_gb": self.activations / GB,
                "dispatch_buffers_gb": self.dispatch_buffers / GB, "total_gb": self.total / GB,
                "budget_gb": self.budget / GB, "mla": self.mla,
                **({"host_weights_gb": self.host_weights / GB, "host_budget_gb": self.host_budget / GB,
                    "offloaded_moe_layers": self.offloaded_layers} if self.host_weights else {})}


def stage_share(model: ModelSpec, layout: Layout) -> float:
    """Share of the decoder layers the busiest pipeline stage holds: ceil(layers / pp) of them (1 without
    pipeline parallelism)."""
    return math.ceil(model.num_layers / layout.pp) / model.num_layers


def kv_bytes_per_token(model: ModelSpec, layout: Layout, prec: Precision, context: float | None = None) -> float:
    """KV bytes one token takes on one GPU of its attention group, all layers of its pipeline stage, for
    sequences `context` tokens long: a sliding-window layer keeps its window's tokens only (vLLM's hybrid KV
    cache manager), so its share of a token shrinks as sequences outgrow the window (None: every layer keeps
    every token)."""
    if model.is_mla:
        per_layer = model.kv_values_per_token_layer
    else:
        per_layer = 2 * max(1, model.num_kv_heads // layout.tp) * model.head_dim
    layers = model.num_layers * (model.attended(context) / context if context else 1.0)
    return per_layer * layers * prec.kv_bytes * stage_share(model, layout)


def routed_expert_bytes(model: ModelSpec, layout: Layout, prec: Precision) -> float:
    """Routed-expert weights of one MoE layer on one GPU: its slots (replicas included), each 1/moe_tp
    of an expert's width."""
    return model.expert_params * layout.slots_per_rank(model.num_experts) / layout.expert_tp * prec.weight_bytes


def weight_bytes(model: ModelSpec, layout: Layout, prec: Precision, mtp: bool = False,
                 offload_layers: int = 0) -> float:
    """Weights on one GPU: attention, dense MLPs and shared experts split over TP, routed experts over
    EP (slots_per_rank of them, replicas included) and moe_tp, embeddings and LM head
    vocabulary-parallel over TP, routers replicated; each module in its own format; with pipeline
    parallelism the busiest stage's ceil(layers / pp) layers and one end's vocabulary matrix (both when
    the embeddings are tied). offload_layers: the routed experts of that many MoE layers live in host
    memory, and two layers' worth of buffers hold them on the GPU (one computing, one arriving)."""
    tp = layout.tp
    attn, dense = nbytes(prec.attn_weights), nbytes(prec.dense_weights)
    routed = routed_expert_bytes(model, layout, prec)
    shared_router = model.shared_params * dense / tp + model.router_params * prec.act_bytes
    experts = (model.num_moe_layers - offload_layers + min(offload_layers, 2)) * routed
    kv_b = kv_b_extra_bytes(model, tp, prec)
    layers = (model.num_layers * model.attention_params_per_rank(tp) * attn + model.num_dense_layers * model.dense_mlp_params * dense / tp
              + model.num_moe_layers * shared_router + experts + model.num_layers * kv_b)
    extra = 0.0
    if mtp and model.mtp_layers:
        # each MTP module: one decoder layer with an MoE block, in its own format, and a 2H x H input projection
        # (eh_proj) in the activation format, replicated on every rank (step_time.StepModel.mtp_draft_step)
        m = prec.for_mtp()
        extra = model.mtp_layers * (model.attention_params_per_rank(tp) * nbytes(m.attn_weights)
                                    + kv_b_extra_bytes(model, tp, m) + routed_expert_bytes(model, layout, m)
                                    + model.shared_params * nbytes(m.dense_weights) / tp
                                    + model.router_params * prec.act_bytes + 2 * model.hidden ** 2 * prec.act_bytes)
    vocab = model.embedding_params if layout.pp == 1 or model.tie_embeddings else model.embedding_params / 2
    return layers * stage_share(model, layout) + extra + vocab * prec.act_bytes / tp


def kv_b_extra_bytes(model: ModelSpec, tp: int, prec: Precision) -> float:
    """Bytes one MLA layer's kv_b_proj (the k and v up-projections) takes on one rank beyond what it would in
    the other attention projections' format (Precision.kv_b; 0 when it is in theirs, or without MLA)."""
    if not model.is_mla or prec.kv_b_weights == prec.attn_weights:
        return 0.0
    _, _, k_up, v_up, _ = model.mla_projections(tp)
    return (k_up + v_up) * (nbytes(prec.kv_b_weights) - nbytes(prec.attn_weights))


def offloaded_bytes(model: ModelSpec, layout: Layout, prec: Precision, layers: int) -> float:
    """Host memory one GPU's offloaded routed experts take (`layers` MoE layers' worth)."""
    return layers * routed_expert_bytes(model, layout, prec)


def layers_to_offload(model: ModelSpec, layout: Layout, prec: Precision, excess: float) -> int:
    """The fewest MoE layers whose routed experts, moved to host memory, free `excess` bytes of the GPU
    (each streamed layer frees its experts, less the two layers of buffers they stream through), as the
    engines offload: a set amount (vLLM's and SGLang's --cpu-offload-gb) or every N-th layer (vLLM's
    offload_group_size / offload_num_in_group), the rest resident; every MoE layer when that is not enough."""
    routed = routed_expert_bytes(model, layout, prec)
    if excess <= 0 or routed <= 0:
        return 0
    whole = excess / routed
    layers = math.floor(whole) + (whole - math.floor(whole) > 1e-9)  # a rounding error is not a layer more
    return min(model.num_moe_layers, layers + 2)


def activation_bytes(model: ModelSpec, layout: Layout, prec: Precision, tokens_per_gpu: int) -> float:
    """Peak working memory of one step (estimate): the group's tokens through the widest layer (the
    expert up-projections of top_k experts, or the dense MLP) plus residual stream copies and logits."""
    group_tokens = tokens_per_gpu * layout.tp
    widest = max(model.top_k * 2 * model.expert_intermediate, 2 * model.dense_intermediate // layout.tp,
                 model.num_heads * (model.qk_nope_dim + model.qk_rope_dim + model.v_head_dim or 3 * model.head_dim) // layout.tp)
    per_token = (4 * model.hidden + widest) * prec.act_bytes
    return group_tokens * per_token + tokens_per_gpu * model.vocab / layout.tp * 4


def dispatch_buffer_bytes(model: ModelSpec, layout: Layout, prec: Precision, tokens_per_gpu: int) -> float:
    """Send and receive space of dispatch and combine for one step, double-buffered: every token's
    top_k rows in the dispatch format one way and the activation format back."""
    if layout.world == 1 or layout.attention_groups == 1:
        return 0.0
    rows = tokens_per_gpu * model.top_k
    return min(DISPATCH_BUFFER_CAP, 2 * rows * model.hidden * (prec.dispatch_bytes + prec.combine_bytes))


def draft_head_bytes(head: DraftHead, layout: Layout, prec: Precision) -> tuple[float, float]:
    """(weights, KV bytes a token) of an EAGLE-3 draft head on one GPU of its TP group: BF16 weights (fc whole,
    the layer and its LM head split), its one layer's KV in the target's KV format (draft_head.py)."""
    return head.params_per_rank(layout.tp) * nbytes("bf16"), kv_bytes_per_token(head.as_model(), layout, prec)


def memory_report(model: ModelSpec, layout: Layout, prec: Precision, hbm_gb: float, *, tokens_per_step: float,
                  kv_tokens_needed: float, memory_fraction: float = 0.9, mtp: bool = False, offload: bool = False,
                  host_gb: float = 0.0, draft: DraftHead | None = None, context: float | None = None) -> MemoryReport:
    """tokens_per_step: tokens one GPU runs in a step; kv_tokens_needed: tokens whose KV one GPU keeps
    (decode: sequences per GPU x tp x context; the attention group's sequences live on each of its ranks),
    of sequences `context` tokens long (kv_bytes_per_token; None: every layer keeps every token).
    offload: the routed experts of as few MoE layers as make the rest fit live in host memory (host_gb per
    GPU, of which memory_fraction may be used); none when everything fits (layers_to_offload). draft: the
    EAGLE-3 head that drafts (its weights and its KV beside the model's)."""
    budget = memory_fraction * hbm_gb * GB
    act = activation_bytes(model, layout, prec, tokens_per_step)
    buffers = dispatch_buffer_bytes(model, layout, prec, tokens_per_step)
    per_token = kv_bytes_per_token(model, layout, prec, context)
    head_weights, head_kv = draft_head_bytes(draft, layout, prec) if draft else (0.0, 0.0)
    per_token += head_kv
    layers = 0
    if offload:
        excess = weight_bytes(model, layout, prec, mtp) + head_weights + act + buffers + per_token * kv_tokens_needed - budget
        layers = layers_to_offload(model, layout, prec, excess)
    weights = weight_bytes(model, layout, prec, mtp, layers) + head_weights
    free = max(0.0, budget - weights - act - buffers)
    host = offloaded_bytes(model, layout, prec, layers)
    return MemoryReport(weights, per_token, int(free // per_token), per_token * kv_tokens_needed, act, buffers, budget,
                        model.is_mla, host, memory_fraction * host_gb * GB, layers)
