"""A deployment's parallel layout and number formats: the plain data the fit and step models take."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from moeserve.capacity.dtypes import W4A8, nbytes


@dataclass(frozen=True)
class Layout:
    """moeserve's --tp/--ep (docs/architecture.md, "Parallel layout"): attention and dense layers split
    over groups of tp ranks; every MoE layer spans the world, its experts split over `ep` expert groups (`redundant`
    extra slots among them) and each expert's intermediate width over the `moe_tp` ranks of a group.

    moe_tp 0 is moeserve's own layout: experts split tensor-parallel over the tp ranks at ep 1, and
    whole experts per rank (MoE TP 1) at ep > 1. A set moe_tp is the MoE TP x EP split of TensorRT-LLM's
    min-latency layouts (attention TP 8, experts TP 4 x EP 2 on 8 GPUs). world = ep x moe_tp.

    pp > 1: pipeline parallelism (vLLM's and TensorRT-LLM's --pipeline-parallel-size): pp stages, each
    this layout over its world of ranks and ceil(layers / pp) of the decoder layers; gpus = world x pp.
    moeserve itself serves no pipeline parallelism (--emit refuses it)."""
    tp: int = 1
    ep: int = 1
    redundant: int = 0
    moe_tp: int = 0
    pp: int = 1

    @property
    def expert_tp(self) -> int:
        if self.moe_tp:
            return self.moe_tp
        return self.tp if self.ep == 1 else 1

    @property
    def world(self) -> int:
        return self.ep * self.expert_tp

    @property
    def gpus(self) -> int:
        """GPUs of the deployment: the world of one pipeline stage times the stages."""
        return self.world * self.pp

    @property
    def attention_groups(self) -> int:
        return self.world // self.tp

    def validate(self, num_experts: int) -> "Layout":
        if self.tp < 1 or self.ep < 1 or self.redundant < 0 or self.moe_tp < 0 or self.pp < 1:
            raise ValueError(f"tp {self.tp}, ep {self.ep}, pp {self.pp}, moe-tp {self.moe_tp} and redundant "
                             f"{self.redundant} must be positive")
        if self.world % self.tp:
            if not self.moe_tp:
                raise ValueError(f"--ep {self.ep} is not a multiple of --tp {self.tp} (or split each expert over "
                                 f"--moe-tp {self.tp // math.gcd(self.ep, self.tp)} ranks: world = ep x moe-tp)")
            raise ValueError(f"--ep {self.ep} x --moe-tp {self.moe_tp} = {self.world} ranks is not a multiple of --tp {self.tp}")
        if self.ep == 1 and self.redundant:
            raise ValueError("redundant experts need --ep > 1")
        if self.redundant > num_experts * (self.ep - 1):
            raise ValueError(f"--redundant {self.redundant}: at most {num_experts * (self.ep - 1)} for {num_experts} "
                             f"experts over --ep {self.ep} (each expert at most once per rank)")
        if self.ep > num_experts + self.redundant:
            raise ValueError(f"--ep {self.ep} is more than the {num_experts + self.redundant} expert slots")
        if self.ep > 1 and (num_experts + self.redundant) % self.ep:
            raise ValueError(f"{num_experts} experts + {self.redundant} redundant do not split evenly over --ep {self.ep} "
                             f"(--redundant auto adds the {-(num_experts + self.redundant) % self.ep} more that make them)")
        return self

    def slots_per_rank(self, num_experts: int) -> int:
        return (num_experts + self.redundant) // self.ep if self.ep > 1 else num_experts


def fill_redundant(num_experts: int, ep: int) -> int:
    """The fewest redundant slots that split `num_experts` evenly over `ep` ranks (0 when they already do)."""
    return -num_experts % ep if ep > 1 else 0


# The format tokens reach the experts in, by the experts' weight format, unless set. FP8 experts: FP8 with
# per-128 scales (DeepEP's dispatch). NVFP4 experts are W4A4: their grouped GEMMs take NVFP4 activations
# (NVIDIA's ModelOpt NVFP4 checkpoints carry an input scale per expert), and the engines quantise before the
# tokens move: TensorRT-LLM fuses the BF16 -> NVFP4 quantisation into the all-reduce + RMSNorm ahead of the
# MoE (tech blog 1, 'Module9') and sends NVFP4 through its all-to-all by default (fused_moe:
# use_postquant_alltoall = TRTLLM_MOE_POST_QUANT_ALLTOALLV, default 1, when the quant mode has NVFP4); vLLM's
# NVFP4 MoE quantises the input to NVFP4 as it gathers the rows into expert order
# (ops.scaled_fp4_experts_quant in cutlass_moe.py's run_cutlass_moe_fp4).
DISPATCH_FORMAT = {"fp8": "fp8", "fp4": "fp4"}


@dataclass(frozen=True)
class Precision:
    """Number formats per module. `weights` sets every linear module left unset (attention projections,
    routed experts, dense MLPs and shared experts); embeddings, LM head and routers stay in the
    activation format. `kv` is the KV cache format, and attention computes in it where the card has
    tensor cores for it (FP8 MLA/FlashAttention). `dispatch` is the format tokens travel to the experts
    in and are permuted into expert order in (default: FP8 with per-128 scales when the experts run FP8,
    as DeepEP does; NVFP4 when they run NVFP4, whose GEMMs take NVFP4 activations and whose engines
    quantise before the all-to-all, DISPATCH_FORMAT); `combine` the
    format they come back in (default the activation format). `mtp` is the format of the MTP module's
    decoder layer and projection (default: as the main model's modules). `kv_b` is the format of MLA's
    k/v up-projection (kv_b_proj) where it differs from the other attention projections' (moeserve serve
    keeps it in the activation format: its halves are absorbed into attention); `attention_compute` the
    format attention's dots compute in where it is not the KV cache's (moeserve's kernels upcast an FP8
    cache to the activation format). Both None unless set (what the engines of the validation run)."""
    weights: str = "fp8"
    kv: str = "bf16"
    activations: str = "bf16"
    attn: str | None = None
    moe: str | None = None
    dense: str | None = None
    dispatch: str | None = None
    combine: str | None = None
    mtp: str | None = None
    kv_b: str | None = None
    attention_compute: str | None = None

    def for_mtp(self) -> "Precision":
        """The formats of the MTP module: every linear module in `mtp` (when set)."""
        if not self.mtp:
            return self
        return Precision(weights=self.mtp, kv=self.kv, activations=self.activations, dispatch=self.dispatch,
                         combine=self.combine, kv_b=self.kv_b, attention_compute=self.attention_compute)

    @property
    def kv_b_weights(self) -> str:
        return self.kv_b or self.attn_weights

    @property
    def attn_weights(self) -> str:
        return self.attn or self.weights

    @property
    def moe_weights(self) -> str:
        return self.moe or self.weights

    @property
    def dense_weights(self) -> str:
        return self.dense or self.weights

    def on_card(self, fp4_tensor_cores: bool) -> "Precision":
        """This precision as a card runs it: NVFP4 experts on a card without FP4 tensor cores run W4A16
        (hardware.peak_flops), whose GEMMs take the activations as they are, so by default the tokens travel
        in the activation format, not NVFP4; MXFP4 experts on a card with FP4 tensor cores run W4A8
        (dtypes.W4A8), whose GEMMs take FP8 activations, so by default the tokens travel in FP8."""
        if self.dispatch is None and not fp4_tensor_cores and DISPATCH_FORMAT.get(self.moe_weights) == "fp4":
            return replace(self, dispatch=self.activations)
        if self.dispatch is None and fp4_tensor_cores and self.moe_weights in W4A8:
            return replace(self, dispatch="fp8")
        return self

    @property
    def dispatch_format(self) -> str:
        if self.dispatch:
            return self.dispatch
        return DISPATCH_FORMAT.get(self.moe_weights, self.activations)

    @property
    def combine_format(self) -> str:
        return self.combine or self.activations

    @property
    def weight_bytes(self) -> float:
        """Bytes per routed-expert weight (the bulk of an MoE's weights)."""
        return nbytes(self.moe_weights)

    @property
    def kv_bytes(self) -> float:
        return nbytes(self.kv)

    @property
    def act_bytes(self) -> float:
        return nbytes(self.activations)

    @property
    def dispatch_bytes(self) -> float:
        """Bytes per value dispatch sends: FP8 carries one fp32 scale per 128 values, NVFP4 one fp8 per 16."""
        fmt = self.dispatch_format
        return 1.0 + 4 / 128 if fmt == "fp8" else nbytes(fmt)

    @property
    def combine_bytes(self) -> float:
        return nbytes(self.combine_format)

    def describe(self) -> str:
        parts = {"attention": self.attn_weights, "experts": self.moe_weights, "dense": self.dense_weights}
        if len(set(parts.values())) == 1:
            text = f"weights {self.moe_weights}"
        else:
            text = ", ".join(f"{k} {v}" for k, v in parts.items())
        if self.kv_b and self.kv_b != self.attn_weights:
            text += f" (MLA kv_b_proj {self.kv_b})"
        kv = f"KV {self.kv}"
        if self.attention_compute and self.attention_compute != self.kv:
            kv += f" (attention computes in {self.attention_compute})"
        mtp = f", MTP {self.mtp}" if self.mtp else ""
        return f"{text}, {kv}, dispatch {self.dispatch_format}, combine {self.combine_format}{mtp}"
