"""Per-layer roofline step-time model of one GPU (the busiest) in one engine step.

Every kernel costs the larger of its compute time (FLOPs over the profile's peak for its number
format times an efficiency factor) and its memory time (bytes over HBM bandwidth times an
efficiency), and inside a CUDA graph at least the profile's `kernel_floor_us`: a layer of small
kernels (batch 1) is bound by how many kernels it runs, not by their bytes. Eager (no CUDA graphs),
a layer also takes at least the host's time to issue its operators (HOST_OPS, each the host time
`layer_overhead_us` gives DeepSeek-V3's mean layer over its operators). (A floor added to the work
instead, latency + bytes / bandwidth, fitted the fitted cases worse: rms log error 0.075 against 0.044.)
A layer's kernels run one after another; communication (comm.py: dispatch/combine, TP all-reduces)
adds to them, hides behind the other micro-batch with two-batch overlap, or with single-batch overlap
hides dispatch behind the shared expert and combine behind the experts' down projection.

Shape legend: T tokens one GPU runs this step, G = T x tp the attention group's tokens, S sequences
per GPU, C context (KV tokens) each query attends to, k top-k, E routed experts, H hidden.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from moeserve.capacity import comm
from moeserve.capacity.draft_head import DraftHead
from moeserve.capacity.dtypes import COMPUTE, W4A8, nbytes
from moeserve.capacity.efficiency import DEFAULT, Efficiency
from moeserve.capacity.gemm import FA3_SHARE, attention_share, kernel_share, marlin_padded_rows, padded_rows
from moeserve.capacity.hardware import Hardware
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.model_spec import ModelSpec

# kernels each part of a layer launches (fused as SGLang and TensorRT-LLM fuse them) and the share of the
# part's work each one does: attention core (rope + cache write, attention, split combine), projections
# (MLA: fused q_a/kv_a, q_b, k and v up-projections, o, by their weights in DeepSeek-V3; GQA: qkv, o),
# routed experts (quantise, up GEMM, activation, down GEMM), shared expert and router (router GEMM, top-k,
# shared up, activation, shared down), dense MLP (up, activation, down), elementwise (two fused residual
# + RMSNorm), LM head (GEMM, gather/argmax). The floor binds kernel by kernel: a part of small kernels
# costs its floors, and a GEMM that outgrows its floor (more rows, more experts) costs more.
KERNEL_WORK = {"attention": (0.0, 1.0, 0.0),
               "projections_mla": (0.081, 0.203, 0.045, 0.045, 0.626),
               "projections_gqa": (0.6, 0.4),
               # with QK-norm (Qwen3-MoE, OLMoE): qkv, the per-head RMSNorm of q and k (one fused kernel, as
               # TensorRT-LLM's fused_qk_norm_rope and SGLang's fused q/k norm run it), o
               "projections_gqa_qk_norm": (0.6, 0.0, 0.4),
               "experts": (0.0, 2 / 3, 0.0, 1 / 3),
               "shared_router": (0.04, 0.0, 0.64, 0.0, 0.32),
               # without a shared expert (Qwen3-MoE, Mixtral, OLMoE): the router GEMM and top-k only
               "router": (1.0, 0.0),
               "dense_mlp": (2 / 3, 0.0, 1 / 3),
               "elementwise": (0.5, 0.5),
               "lm_head": (1.0, 0.0),
               # an MTP draft beyond its decoder layer: the two input RMSNorms, the concatenation and eh_proj
               # (DeepSeek-V3 report, section 2.2), and sampling the draft (argmax) and preparing the next input
               "mtp_input": (0.0, 0.0, 1.0), "mtp_sample": (1.0, 0.0),
               # an EAGLE-3 draft beyond its decoder layer: fc (three target hidden states -> one, the first draft
               # after a verify only), the RMSNorms of the embedding and of the fused state (draft_head.py)
               "eagle3_input": (1.0, 0.0, 0.0)}
KERNELS = {k: len(v) for k, v in KERNEL_WORK.items()}
# operators an eager decoder layer issues from the host, each a Python call, its dispatch and launch, by part, as
# SGLang's 2025 forward paths issue them for prefill (models/deepseek_v2.py forward_normal_prepare/_core,
# qwen3_moe.py, the FusedMoE Triton runner); counted are the operators that launch GPU work, not the views
# and splits between them: a layer's two fused residual + RMSNorms and two TP all-reduces; MLA's fused q_a/kv_a,
# q_b, kv_b and o GEMMs, the q_a and kv_a RMSNorms, a contiguous copy of the latent, RoPE, five slice writes
# assembling k and the latent cache, the cache write and the attention; GQA's qkv and o GEMMs, RoPE (writing
# the cache) and the attention, with QK-norm the q and k RMSNorms; routed experts' router GEMM, top-k, block
# alignment, two grouped GEMMs, SwiGLU and the sum over top-k; a shared expert's up GEMM, SwiGLU, down GEMM and
# its add; a dense MLP's up, SwiGLU and down. Activation quantisation ahead of FP8 GEMMs is not counted (one
# count for every format).
HOST_OPS = {"layer": 4, "attention_mla": 15, "attention_gqa": 4, "qk_norm": 2, "experts": 7, "shared_expert": 4,
            "dense_mlp": 3}
# DeepSeek-V3's mean over its 3 dense and 58 MoE layers (22 and 30 operators): the layer `layer_overhead_us` measures
REFERENCE_HOST_OPS = (3 * 22 + 58 * 30) / 61
# the routed experts' down projection: a third of their weights and FLOPs (gate, up, down); single-batch
# overlap hides combine behind it
DOWN_SHARE = 1 / 3


@dataclass(frozen=True)
class StepInput:
    phase: str  # "prefill" or "decode"
    tokens: float  # T: tokens per GPU this step (decode: sequences x (1 + draft tokens))
    context: float  # C: mean KV tokens each query token attends to
    sequences: float  # S: sequences per GPU this step
    prefix_tokens: float = 0  # prefill: cached prefix tokens per GPU (expanded from the latent for MLA)
    balancedness: float = 1.0  # mean / max expert load over EP ranks (placement quality)
    tbo: bool = False  # two-batch overlap
    cuda_graphs: bool = True
    # prefill: the share of MoE layers whose routed experts stream from host memory (spread evenly, the
    # rest resident); 0 none, 1 every layer
    offload: float = 0.0
    sbo: bool = False  # single-batch overlap: dispatch behind the shared expert, combine behind the down GEMM


@dataclass
class StepTime:
    """Seconds per step by part (the busiest GPU), and the step total."""
    parts: dict = field(default_factory=dict)
    total: float = 0.0

    def add(self, name: str, seconds: float) -> None:
        self.parts[name] = self.parts.get(name, 0.0) + seconds


class StepModel:
    def __init__(self, model: ModelSpec, hw: Hardware, layout: Layout, prec: Precision, eff: Efficiency = DEFAULT):
        self.m, self.hw, self.lay, self.p, self.eff = model, hw, layout, prec, eff

    # --- kernels ---------------------------------------------------------------------------------
    def roofline(self, flops: float, nbytes_: float, fmt: str, compute_eff: float, memory_eff: float) -> float:
        return max(flops / (self.hw.peak_flops(fmt) * compute_eff), nbytes_ / (self.hw.memory_bandwidth_gbs * 1e9 * memory_eff))

    def gemm(self, rows: float, params: float, weights: str | None = None, groups: float = 1.0) -> float:
        """`groups` GEMMs of `rows` rows each against `params` weights each, in format `weights` (None:
        the activation format: LM head, routers). Rows are padded to the kernels' tile; the compute
        efficiency follows the card's published curve for that many rows (gemm.py)."""
        if rows <= 0 or params <= 0 or groups <= 0:
            return 0.0
        fmt = weights or self.p.activations
        # W4A16 (int4; FP4 weights on a card without FP4 tensor cores) runs Marlin's row blocks, not the card's tiles
        w4a16 = fmt == "int4" or COMPUTE[fmt] == "fp4" and not self.hw.has_tensor_format("fp4")
        padded = marlin_padded_rows(rows) if w4a16 else padded_rows(rows, self.hw.gemm_tiles())
        compute = self.compute_format(fmt)
        share = kernel_share(self.hw.card_class, padded, compute)
        flops = 2 * groups * padded * params
        nbytes_ = groups * (params * nbytes(fmt) + 2 * rows * self.m.hidden * self.p.act_bytes)
        return self.roofline(flops, nbytes_, compute, self.eff.gemm * share, self.eff.weight_stream)

    def compute_format(self, weights: str) -> str:
        """The tensor-core format a GEMM with `weights` multiplies in: MXFP4 weights on a card with FP4 tensor
        cores take MXFP8 activations and run at the FP8 peak (W4A8: TensorRT-LLM's MoE kernels for MXFP4 on
        Blackwell, FlashInfer's MXFP4 x MXFP8, AMD's mxfp4_fp8 gpt-oss; dtypes.W4A8); the rest as dtypes.COMPUTE
        (FP4 weights on a card without FP4 tensor cores fall back to BF16 in Hardware.peak_flops: W4A16)."""
        if weights in W4A8 and self.hw.has_tensor_format("fp4"):
            return "fp8"
        return COMPUTE[weights]

    def attention_format(self) -> str:
        """Attention computes in the KV format where the card has tensor cores for it (FP8 MLA/FA3), unless
        the precision says otherwise (`attention_compute`)."""
        if self.p.attention_compute:
            return COMPUTE[self.p.attention_compute]
        kv = COMPUTE[self.p.kv]
        if kv in ("fp4", "fp8") and self.hw.has_tensor_format("fp8"):
            return "fp8"
        return COMPUTE[self.p.activations]

    def attention_core(self, s: StepInput) -> float:
        m, tp = self.m, self.lay.tp
        group_tokens, group_seqs = s.tokens * tp, s.sequences * tp
        decode = s.phase == "decode"
        # the tokens a query attends to, a layer on average: a sliding-window layer (gpt-oss) attends to and
        # reads at most its window, so of a prefill's cached tokens it reads the share the mean context gives
        attended = m.attended(s.context)
        flops = group_tokens * attended * m.attention_flops_per_pair(absorbed=decode) / tp
        kv_layer = self.kv_bytes_per_token_layer()
        kept = attended / s.context if s.context > 0 else 1.0
        read_tokens = group_seqs * attended if decode else s.prefix_tokens * tp * kept
        nbytes_ = (read_tokens + group_tokens) * kv_layer + 2 * group_tokens * m.hidden * self.p.act_bytes
        if decode:
            compute_eff = self.eff.attention_decode
        else:  # MLA: the fitted prefill factor; GQA on a GPU: FlashAttention-3's published share (gemm.FA3_SHARE)
            fa3 = not m.is_mla and self.hw.card_class != "cpu"
            compute_eff = (FA3_SHARE if fa3 else self.eff.attention) * attention_share(self.hw.card_class)
        return self.roofline(flops, nbytes_, self.attention_format(), compute_eff, self.eff.kv_stream)

    def kv_bytes_per_token_layer(self) -> float:
        m = self.m
        if m.is_mla:
            return m.kv_values_per_token_layer * self.p.kv_bytes
        return 2 * max(1, m.num_kv_heads // self.lay.tp) * m.head_dim * self.p.kv_bytes

    def expert_rows(self, s: StepInput) -> tuple[float, float, float]:
        """(active experts, rows per active expert, weights per expert) on the busiest rank. Every
        distinct token of the world (T x world) picks k experts; an EP group of moe_tp ranks takes 1/ep
        of the picks, each of its ranks all of them against 1/moe_tp of every expert's width."""
        m, lay = self.m, self.lay
        assignments = s.tokens * m.top_k * lay.expert_tp / (s.balancedness if lay.ep > 1 else 1.0)
        slots = lay.slots_per_rank(m.num_experts)
        active = slots * (1 - (1 - 1 / slots) ** assignments)  # experts with at least one row (uniform within the rank)
        return active, (assignments / active if active > 0 else 0.0), m.expert_params / lay.expert_tp

    def experts(self, s: StepInput) -> float:
        """Routed experts of one MoE layer on the busiest rank: one grouped GEMM over its active experts."""
        active, rows, params = self.expert_rows(s)
        if active <= 0:
            return 0.0
        t = self.gemm(rows, params, self.p.moe_weights, groups=active)
        return t + active * self.hw.expert_overhead_us * 1e-6

    def offload_seconds(self) -> float:
        """Streaming one MoE layer's routed experts of this rank from host memory (prefetched during the
        layer before it, so only what the layer's own time does not cover is exposed)."""
        lay, m = self.lay, self.m
        nbytes_ = lay.slots_per_rank(m.num_experts) * m.expert_params / lay.expert_tp * self.p.weight_bytes
        if self.hw.host_link_gbs <= 0:
            raise ValueError(f"{self.hw.name} has no host link (host_link_gbs) to offload weights over")
        return nbytes_ / (self.hw.host_link_gbs * 1e9 * self.eff.network)

    # --- layers and the step ---------------------------------------------------------------------
    def layer(self, s: StepInput, moe: bool) -> tuple[dict, tuple[float, float, float]]:
        """(compute parts in seconds, (all-reduce, dispatch, combine) seconds) of one decoder layer,
        before kernel latencies."""
        m, tp = self.m, self.lay.tp
        group = s.tokens * tp
        parts = {"attention": self.attention_core(s), "projections": self.projections(group)}
        if m.is_mla and s.phase == "prefill" and s.prefix_tokens:
            # the cached prefix's latents are expanded to keys and values by kv_b for non-absorbed attention
            kv_b = m.kv_lora_rank * m.num_heads * (m.qk_nope_dim + m.v_head_dim)
            parts["projections"] += self.gemm(s.prefix_tokens * tp, kv_b / tp, self.p.kv_b_weights)
        reduce_s, dispatch_s, combine_s = 2 * comm.all_reduce(self, s), 0.0, 0.0
        if moe:
            parts["experts"] = self.experts(s)
            parts["shared_router"] = self.gemm(group, m.shared_params / tp, self.p.dense_weights) + self.gemm(s.tokens, m.router_params)
            dispatch_s, combine_s = comm.dispatch_and_combine(self, s)
        else:
            parts["dense_mlp"] = self.gemm(group, m.dense_mlp_params / tp, self.p.dense_weights)
        parts["elementwise"] = self.elementwise(s, moe)
        return parts, (reduce_s, dispatch_s, combine_s)

    def projections(self, group: float) -> float:
        """One attention layer's projection GEMMs over the group's tokens, MLA's kv_b_proj in its own format
        where the precision gives it one (Precision.kv_b)."""
        m, tp, p = self.m, self.lay.tp, self.p
        if not m.is_mla or p.kv_b_weights == p.attn_weights:
            return self.gemm(group, m.attention_params_per_rank(tp), p.attn_weights)
        _, _, k_up, v_up, _ = m.mla_projections(tp)
        return (self.gemm(group, m.attention_params_per_rank(tp) - k_up - v_up, p.attn_weights)
                + self.gemm(group, k_up + v_up, p.kv_b_weights))

    def elementwise(self, s: StepInput, moe: bool) -> float:
        """Memory-bound kernels between the GEMMs, by the bytes they move: two residual + RMSNorm passes
        (read x and residual, write both) per group token; in an MoE layer per row of this rank the
        permutation into expert order and back (dispatch format in, activation format out), the SwiGLU
        (read gate and up, write the product in the expert format) and the weighted combine; in a dense
        layer the SwiGLU of the MLP."""
        m, lay, a = self.m, self.lay, self.p.act_bytes
        group = s.tokens * lay.tp
        nbytes_ = group * 8 * m.hidden * a
        if moe:
            active, rows, _ = self.expert_rows(s)
            inter = m.expert_intermediate / lay.expert_tp
            per_row = 2 * m.hidden * (self.p.dispatch_bytes + a) + inter * (2 * a + nbytes(self.p.moe_weights))
            nbytes_ += active * rows * per_row
        else:
            inter = m.dense_intermediate / lay.tp
            nbytes_ += group * inter * (2 * a + nbytes(self.p.dense_weights))
        return nbytes_ / (self.hw.memory_bandwidth_gbs * 1e9 * self.eff.weight_stream)

    def kernel_work(self, part: str) -> tuple:
        if part == "projections":
            if self.m.is_mla:  # by the weights each kernel reads on this rank (the down projections replicated)
                weights = self.m.mla_projections(self.lay.tp)
                return tuple(w / sum(weights) for w in weights)
            return KERNEL_WORK["projections_gqa_qk_norm" if self.m.qk_norm else "projections_gqa"]
        if part == "shared_router" and not self.m.shared_params:
            return KERNEL_WORK["router"]  # no shared-expert kernels to launch
        return KERNEL_WORK[part]

    def floored(self, parts: dict) -> dict:
        """Each part's kernels at least their floor, kernel by kernel (KERNEL_WORK): `kernel_floor_us` a
        kernel, launch gap to finish (eager, the host's time to issue a layer is `host_bound`'s)."""
        floor = self.hw.kernel_floor_us * 1e-6
        return {k: sum(max(floor, w * v) for w in self.kernel_work(k)) for k, v in parts.items()}

    def host_bound(self, s: StepInput, gpu_seconds: float, moe: bool = True) -> float:
        """Seconds a layer's GPU waits for the host beyond `gpu_seconds` of its own work. Inside a CUDA
        graph none; eager, the host issues each operator of the layer while the GPU runs those already
        issued, so the layer takes the longer of the two. The host's time is per operator: `layer_overhead_us`
        for DeepSeek-V3's mean layer (REFERENCE_HOST_OPS operators), in proportion for this layer's
        (`host_ops`), twice with two-batch overlap (each micro-batch's operators)."""
        if s.cuda_graphs:
            return 0.0
        host = self.hw.layer_overhead_us * 1e-6 * self.host_ops(moe) / REFERENCE_HOST_OPS * (2 if s.tbo else 1)
        return max(0.0, host - gpu_seconds)

    def host_ops(self, moe: bool) -> int:
        """Operators the host issues for one decoder layer eager (HOST_OPS): its norms and all-reduces, its
        attention (MLA or GQA, with or without QK-norm) and its MLP (routed experts with or without a shared
        expert, or dense)."""
        m = self.m
        ops = HOST_OPS["layer"] + HOST_OPS["attention_mla" if m.is_mla else "attention_gqa"]
        ops += HOST_OPS["qk_norm"] if m.qk_norm and not m.is_mla else 0
        if moe:
            return ops + HOST_OPS["experts"] + (HOST_OPS["shared_expert"] if m.shared_params else 0)
        return ops + HOST_OPS["dense_mlp"]

    def exposed_communication(self, s: StepInput, parts: dict, comm_parts: tuple) -> float:
        """Communication the layer's kernels do not hide: all of it; with two-batch overlap `overlap` of
        the shorter of compute and communication is hidden; with single-batch overlap `overlap` of
        dispatch behind the shared expert and of combine behind the routed experts' down projection."""
        reduce_s, dispatch_s, combine_s = comm_parts
        comm_s = reduce_s + dispatch_s + combine_s
        compute = sum(parts.values())
        if s.tbo:
            return max(compute, comm_s) + (1 - self.eff.overlap) * min(compute, comm_s) - compute
        if s.sbo:
            hidden = min(dispatch_s, parts.get("shared_router", 0.0)) + min(combine_s, DOWN_SHARE * parts.get("experts", 0.0))
            return comm_s - self.eff.overlap * hidden
        return comm_s

    def layer_time(self, s: StepInput, moe: bool, out: StepTime, count: int) -> None:
        if s.tbo:
            half = replace(s, tokens=s.tokens / 2, sequences=s.sequences / 2, prefix_tokens=s.prefix_tokens / 2)
            parts, comm_parts = self.layer(half, moe)
            parts = {k: 2 * v for k, v in self.floored(parts).items()}
            comm_parts = tuple(2 * c for c in comm_parts)
        else:
            parts, comm_parts = self.layer(s, moe)
            parts = self.floored(parts)
        exposed = self.exposed_communication(s, parts, comm_parts)
        compute = sum(parts.values())
        fixed = self.hw.graph_layer_overhead_us * 1e-6 + self.host_bound(s, compute + exposed, moe)
        offload = 0.0
        if moe and s.offload > 0:
            # one streamed layer in every 1 / share: its transfer runs behind the layers since the last one
            window = (compute + exposed) / s.offload
            offload = s.offload * max(0.0, self.offload_seconds() - window)
        for k, v in parts.items():
            out.add(k, v * count)
        out.add("communication", exposed * count)
        out.add("overhead", fixed * count)
        if offload:
            out.add("offload", offload * count)

    def step(self, s: StepInput, mtp_draft: int = 0, mtp_accept: float = 1.0, draft: DraftHead | None = None) -> StepTime:
        """Seconds of one step on the busiest GPU. mtp_draft: draft tokens per sequence, each a draft step on
        the step's sequences: the model's MTP module's (mtp_draft_step), or with `draft` an EAGLE-3 head's
        (eagle3_draft_step); the first runs the tokens the verify step accepted (mtp_accept per sequence), the
        others one each."""
        m = self.m
        out = StepTime()
        self.layer_time(s, False, out, m.num_dense_layers)
        self.layer_time(s, True, out, m.num_moe_layers)
        logit_rows = s.tokens if s.phase == "decode" else s.sequences
        out.add("lm_head", self.lm_head(logit_rows, s.cuda_graphs))
        for i in range(mtp_draft):
            if draft:
                self.eagle3_draft_step(s, out, draft, mtp_accept if i == 0 else 1.0, first=i == 0)
            elif m.mtp_layers:
                self.mtp_draft_step(s, out, mtp_accept if i == 0 else 1.0)
        if self.lay.pp > 1:
            out.add("communication", comm.pipeline_handoffs(self, s))
        out.add("overhead", self.hw.step_overhead_ms * 1e-3 + s.sequences * self.hw.seq_overhead_us * 1e-6)
        out.total = sum(out.parts.values())
        return out

    def mtp_draft_step(self, s: StepInput, out: StepTime, tokens_per_sequence: float = 1.0) -> None:
        """One draft token for each of the step's sequences (DeepSeek-V3 report, section 2.2; TensorRT-LLM
        tech blog 2, 'MTP Eagle'): RMSNorm the embedding of the last token and the previous hidden state,
        concatenate them and project 2H -> H (eh_proj: replicated on every rank and in the activation format,
        as DeepSeek's checkpoints store it and vLLM's deepseek_mtp.py builds it, a plain nn.Linear that takes
        no quant_config), run the MTP module's
        decoder layer (an MoE layer, in `Precision.mtp`'s format when set: TensorRT-LLM's min-latency
        recipe keeps it BF16), then the shared LM head and the draft's argmax. Each part has its kernels'
        latency like the main model's. The first draft after a verify step runs every token it accepted
        (tokens_per_sequence: the mean accepted length), as TensorRT-LLM's MTP Eagle feeds "all of them
        along with their corresponding hidden states" to the first MTP forward (tech blog 2) and SGLang's
        draft extend after verify does; the LM head and argmax only for the last of them."""
        draft = replace(s, tokens=s.sequences * tokens_per_sequence, offload=0.0)
        sm = self if not self.p.mtp else StepModel(self.m, self.hw, self.lay, self.p.for_mtp(), self.eff)
        h = self.m.hidden
        group = draft.tokens * self.lay.tp
        eh = sm.gemm(group, 2 * h * h) + group * 6 * h * self.p.act_bytes / (
            self.hw.memory_bandwidth_gbs * 1e9 * self.eff.weight_stream)
        out.add("mtp_draft", self.floored({"mtp_input": eh})["mtp_input"])
        layer = StepTime()
        sm.layer_time(draft, True, layer, 1)
        for k, v in layer.parts.items():
            out.add("mtp_draft" if k != "communication" else k, v)
        out.add("mtp_draft", self.lm_head(s.sequences, s.cuda_graphs)
                + self.floored({"mtp_sample": 0.0})["mtp_sample"])

    def eagle3_draft_step(self, s: StepInput, out: StepTime, head: DraftHead, tokens_per_sequence: float = 1.0,
                          first: bool = True) -> None:
        """One draft token for each of the step's sequences from an EAGLE-3 head (draft_head.py): after a verify
        (`first`) fc fuses the target's three hidden states of every accepted token (tokens_per_sequence a
        sequence, as SGLang's draft extend runs them), then the RMSNorms of the embedding and the fused state,
        the head's decoder layer (a dense GQA layer whose q, k and v read both, 2 x hidden wide) split over the
        target's TP group with its all-reduces, its LM head over the draft vocabulary for each sequence's last
        token, and the draft's argmax. BF16 weights, the target's KV format; each kernel at least its floor."""
        draft = replace(s, tokens=s.sequences * tokens_per_sequence if first else s.sequences, offload=0.0,
                        tbo=False, sbo=False, prefix_tokens=0)
        sm = Eagle3Layer(head, self.hw, Layout(tp=self.lay.tp), Precision(weights="bf16", kv=self.p.kv,
                         activations=self.p.activations, attention_compute=self.p.attention_compute), self.eff)
        group = draft.tokens * self.lay.tp
        fc = sm.gemm(group, head.fc_params) if first else 0.0
        work = KERNEL_WORK["eagle3_input"] if first else KERNEL_WORK["eagle3_input"][1:]
        out.add("mtp_draft", sum(max(self.hw.kernel_floor_us * 1e-6, w * fc) for w in work))
        layer = StepTime()
        sm.layer_time(draft, False, layer, 1)
        for k, v in layer.parts.items():
            out.add("mtp_draft" if k != "communication" else k, v)
        out.add("mtp_draft", sm.lm_head(s.sequences, s.cuda_graphs) + self.floored({"mtp_sample": 0.0})["mtp_sample"])

    def lm_head(self, rows: float, cuda_graphs: bool = True) -> float:
        """The LM head over `rows` rows per GPU (split over TP), with its kernels' latency."""
        t = self.gemm(rows * self.lay.tp, self.m.vocab * self.m.hidden / self.lay.tp)
        return sum(max(self.hw.kernel_floor_us * 1e-6, w * t) for w in KERNEL_WORK["lm_head"])


class Eagle3Layer(StepModel):
    """An EAGLE-3 head's decoder layer and LM head as the step model's kernels run them (draft_head.DraftHead):
    its q, k and v projections read the embedding and the fused hidden state concatenated (2 x hidden)."""

    def __init__(self, head: DraftHead, hw: Hardware, layout: Layout, prec: Precision, eff: Efficiency = DEFAULT):
        super().__init__(head.as_model(), hw, layout, prec, eff)
        self.head = head

    def projections(self, group: float) -> float:
        return self.gemm(group, (self.head.qkv_params + self.head.o_params) / self.lay.tp, self.p.attn_weights)
