"""One deployment's predicted latency and throughput: decode, prefill, colocated or P/D split.

Definitions. Decode: `batch` sequences per GPU; a step advances each by `mtp_accept` tokens on
average (1 without MTP), so TPOT = step / mtp_accept and output tokens/s per GPU = batch x
mtp_accept / step. Prefill: `batch` tokens per GPU per step; input tokens/s per GPU counts prefix
cache hits as input (as DeepSeek's published figure does) though only the missed part is computed;
TTFT = half a step of waiting + the steps the prompt takes. Colocated: each GPU interleaves prefill
chunks with decode steps; the share of time prefill takes slows decode (TPOT) and bounds throughput.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from moeserve.capacity.draft_head import DraftHead, default_head
from moeserve.capacity.efficiency import DEFAULT, Efficiency
from moeserve.capacity.hardware import Hardware
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.memory import kv_bytes_per_token, memory_report
from moeserve.capacity.model_spec import ModelSpec
from moeserve.capacity.step_time import StepInput, StepModel


# Tokens one engine step may prefill: one scheduler per attention group (TP group; each data-parallel rank
# runs its own), its TP ranks splitting every step's tokens. vLLM V1's default max_num_batched_tokens for an
# OpenAI server on a card of 70 GiB or more (EngineArgs.get_batch_defaults, vllm/engine/arg_utils.py:
# 8,192; 16,384 for the offline LLM class, 2,048 and 8,192 on smaller cards; V1's scheduler spends it on the
# running decodes first and fills the rest with prefill chunks); SGLang's chunked_prefill_size (server_args:
# 8,192 on cards under 160 GB, 16,384 above in later releases) is its scheduler's, one per TP group, too.
ENGINE_CHUNK = 8192
# How a colocated deployment schedules prefill beside the running decodes (Options.prefill): in chunks the decodes
# ride in (vLLM V1, TensorRT-LLM), in chunks the decodes wait out (SGLang, chunked), or as passes of the prompts
# that arrived since the last: eager (SGLang under a closed-loop load) or compiled (ROCm ATOM's server)
PREFILL_MODES = ("mixed", "stalled", "separate", "separate-compiled")
SEPARATE_MODES = ("separate", "separate-compiled")
# the mode of each engine's default scheduler, as configure reads `--engine` without `--colocated-prefill`: SGLang
# prefills what arrived as eager forwards of their own (no --enable-mixed-chunk by default; the reading of every
# SGLang run of the validation table), vLLM V1 and TensorRT-LLM fill a step with the running decodes and prompt chunks,
# ATOM's server prefills what arrived in compiled forwards of their own
ENGINE_PREFILL = {"sglang": "separate", "vllm": "mixed", "trtllm": "mixed", "atom": "separate-compiled"}


@dataclass(frozen=True)
class Workload:
    isl: int  # input tokens per request
    osl: int  # output tokens per request
    cache_hit: float = 0.0  # share of input tokens served from the prefix cache
    # spread of prompt lengths (std / mean; 0 = all prompts isl long, as benchmarks send): a prefill
    # token attends on average to E[L^2] / (2 E[L]) = (1 + cv^2) isl / 2 earlier tokens, so long
    # prompts dominate attention work
    isl_cv: float = 0.0
    ttft_slo_ms: float | None = None
    tpot_slo_ms: float | None = None

    @property
    def computed_input(self) -> int:
        return max(1, round(self.isl * (1 - self.cache_hit)))

    @property
    def decode_context(self) -> float:
        """Mean KV length a decode step attends to: the prompt plus half the output."""
        return self.isl + self.osl / 2


@dataclass(frozen=True)
class Options:
    mtp_accept: float = 1.0  # mean tokens a decode step yields per sequence (MTP: 1 + accepted drafts)
    tbo: bool = False
    cuda_graphs: bool = True
    balancedness: float = 1.0
    memory_fraction: float = 0.9
    decode_context: float | None = None  # mean KV length at decode, when known (else from the workload)
    mtp_draft: int | None = None  # draft tokens per step (None: the fewest that can yield mtp_accept)
    # the EAGLE-3 head that drafts (None: the model's MTP module, or without one its default head, draft_head.py)
    draft_head: DraftHead | None = None
    offload: bool = False  # prefill: routed experts in host memory, streamed layer by layer
    sbo: bool = False  # single-batch overlap of dispatch/combine with the shared expert and down GEMM
    # colocated: how the engine schedules prefill beside the running decodes (PREFILL_MODES):
    # "mixed": prefill chunks of `chunk` tokens share the GPUs' time and the running decodes ride in each chunk's
    #   step, yielding their tokens in it (vLLM V1's scheduler fills a step with the running requests first, then
    #   prefill chunks in the budget left, vllm/v1/core/sched/scheduler.py; TensorRT-LLM's in-flight batching runs
    #   context and generation requests in one batch; trtllm-bench);
    # "stalled": prefill chunks, each a forward of its own while the decodes wait (SGLang's scheduler without
    #   --enable-mixed-chunk, chunked);
    # "separate": each prefill is a forward pass of its own, eager, of the prompts that arrived since the last one
    #   (SGLang's scheduler without --enable-mixed-chunk, under a load that keeps `batch` requests in flight:
    #   bench_serving --max-concurrency);
    # "separate-compiled": the same passes run as a torch.compile'd forward, whose kernels the host issues without
    #   an eager layer's Python operator dispatch, so a pass costs its kernels (their floors) and no host time
    #   (ROCm ATOM's server: its scheduler does not mix prefill with decode, and its default compilation level 3
    #   compiles the forward, atom/model_engine/arg_utils.py)
    prefill: str = "mixed"

    def __post_init__(self) -> None:
        if self.prefill not in PREFILL_MODES:
            raise ValueError(f"Options.prefill {self.prefill!r} is not one of {', '.join(PREFILL_MODES)}")

    def pass_options(self) -> "Options":
        """The options of a prefill pass of its own ("separate" modes): eager for "separate", as the decode steps
        run (CUDA graphs or not) for "separate-compiled"; never offloaded or two-batch overlapped."""
        return replace(self, offload=False, tbo=False,
                       cuda_graphs=self.cuda_graphs and self.prefill == "separate-compiled")

    @property
    def draft_tokens(self) -> int:
        if self.mtp_draft is not None:
            return self.mtp_draft
        return math.ceil(self.mtp_accept - 1 - 1e-9) if self.mtp_accept > 1 else 0


@dataclass
class Prediction:
    phase: str
    layout: Layout
    batch: float  # decode: sequences per GPU; prefill: tokens per GPU per step
    step_ms: float
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    input_tokens_per_s_per_gpu: float = 0.0
    output_tokens_per_s_per_gpu: float = 0.0
    memory: dict = field(default_factory=dict)
    fits: bool = True
    breakdown_ms: dict = field(default_factory=dict)
    prefill_gpus: int = 0  # P/D: GPUs of the prefill side
    decode_gpus: int = 0
    sides: tuple = ()  # P/D: (prefill Prediction, decode Prediction)
    offload: bool = False  # prefill: routed experts streamed from host memory

    def meets(self, w: Workload) -> bool:
        """Fits and meets the SLOs that apply (a decode side has no TTFT, a prefill side no TPOT)."""
        ok_ttft = w.ttft_slo_ms is None or self.ttft_ms is None or self.ttft_ms <= w.ttft_slo_ms
        ok_tpot = w.tpot_slo_ms is None or self.tpot_ms is None or self.tpot_ms <= w.tpot_slo_ms
        return self.fits and ok_ttft and ok_tpot

    def goodput(self, w: Workload) -> float:
        """Tokens/s per GPU that meet the SLOs (output; input for a prefill side): all, or none if one is missed."""
        return (self.output_tokens_per_s_per_gpu or self.input_tokens_per_s_per_gpu) if self.meets(w) else 0.0


class Predictor:
    def __init__(self, model: ModelSpec, hw: Hardware, prec: Precision, eff: Efficiency = DEFAULT):
        self.model, self.hw, self.prec, self.eff = model, hw, prec.on_card(hw.has_tensor_format("fp4")), eff

    def draft_head(self, o: Options) -> DraftHead | None:
        """The EAGLE-3 head that drafts, if drafts are run and not by the model's own MTP module: the one
        `o.draft_head` gives, else (a model without MTP layers) its shipped or assumed head (draft_head.py)."""
        if not o.draft_tokens:
            return None
        return o.draft_head or (None if self.model.mtp_layers else default_head(self.model))

    def decode(self, layout: Layout, batch: float, w: Workload, o: Options) -> Prediction:
        """batch: sequences per GPU. With pp pipeline stages the sequences of an attention group
        (batch x pp x tp of them) run as up to pp micro-batches in flight, each through every stage in
        turn (vLLM's and TensorRT-LLM's pipeline schedulers): a token takes one pass through all layers
        at a micro-batch, step_ms, and each stage works on another micro-batch meanwhile; fewer
        sequences than stages (batch 1) run the stages one after another."""
        ctx = o.decode_context or w.decode_context
        micro_batches = min(layout.pp, max(1, math.floor(batch * layout.pp * layout.tp + 1e-9)))
        micro = batch * layout.pp / micro_batches  # sequences per GPU of a stage in one micro-batch
        tokens = micro * (1 + o.draft_tokens)
        s = StepInput("decode", tokens, ctx, micro, balancedness=o.balancedness, tbo=o.tbo, cuda_graphs=o.cuda_graphs,
                      sbo=o.sbo)
        draft = self.draft_head(o)
        st = StepModel(self.model, self.hw, layout, self.prec, self.eff).step(s, o.draft_tokens, o.mtp_accept, draft)
        mem = memory_report(self.model, layout, self.prec, self.hw.memory_gb, tokens_per_step=math.ceil(tokens),
                            kv_tokens_needed=math.ceil(batch * layout.pp * layout.tp * (w.isl + w.osl)),
                            memory_fraction=o.memory_fraction, mtp=o.draft_tokens > 0 and not draft, draft=draft,
                            context=w.isl + w.osl)
        return Prediction("decode", layout, batch, st.total * 1e3, tpot_ms=st.total * 1e3 / o.mtp_accept,
                          output_tokens_per_s_per_gpu=batch * o.mtp_accept / st.total, memory=mem.as_dict(),
                          fits=mem.fits, breakdown_ms={k: v * 1e3 for k, v in st.parts.items()})

    def prefill(self, layout: Layout, batch: float, w: Workload, o: Options) -> Prediction:
        """batch: computed tokens per GPU per step (whole prompts when they fit). A prompt longer than a
        step's tokens (batch x tp over a TP group) is prefilled in chunks, each attending to the cached
        chunks before it (on average (computed - step tokens) / 2 of them, which with half of its own
        tokens makes a causal prompt's L^2 / 2 pairs) and reading them from the KV cache; MLA expands
        their latents to keys and values with kv_b in every chunk, as it does a cached prefix (vLLM's
        chunked-context MLA prefill, SGLang's chunked-KV MHA path)."""
        new = w.computed_input
        seqs = max(batch / new, 1e-9)
        group = batch * layout.tp
        earlier = max(0.0, new - group) / 2  # cached tokens of the prompt's earlier chunks, mean over its chunks
        prefix = w.isl - new
        context = (prefix + earlier + min(new, group) / 2) * (1 + w.isl_cv ** 2)
        # cached tokens per GPU the step's queries attend to: its sequences' prefixes, or one chunked prompt's
        cached = round(seqs * prefix) if not earlier else (prefix + earlier) / layout.tp
        mem = memory_report(self.model, layout, self.prec, self.hw.memory_gb, tokens_per_step=math.ceil(batch),
                            kv_tokens_needed=math.ceil(max(seqs, 1) * layout.pp * layout.tp * w.isl),
                            memory_fraction=o.memory_fraction,
                            offload=o.offload, host_gb=self.hw.host_memory_gb, context=w.isl)
        streamed = mem.offloaded_layers / max(1, self.model.num_moe_layers)
        s = StepInput("prefill", batch, context, max(1, round(seqs)), prefix_tokens=cached,
                      balancedness=o.balancedness, tbo=o.tbo, cuda_graphs=o.cuda_graphs, offload=streamed,
                      sbo=o.sbo)
        st = StepModel(self.model, self.hw, layout, self.prec, self.eff).step(s)
        steps = math.ceil(new / group)  # a TP group's step prefills batch x tp of a prompt's tokens
        return Prediction("prefill", layout, batch, st.total * 1e3, ttft_ms=(steps + 0.5) * st.total * 1e3,
                          input_tokens_per_s_per_gpu=batch / st.total * w.isl / new, memory=mem.as_dict(),
                          fits=mem.fits, breakdown_ms={k: v * 1e3 for k, v in st.parts.items()}, offload=streamed > 0)

    def colocated(self, layout: Layout, batch: float, w: Workload, o: Options, chunk: int = ENGINE_CHUNK) -> Prediction:
        """batch sequences per GPU decoding; prompts are prefilled in chunks of `chunk` tokens a step of
        an attention group's scheduler (chunk / tp a GPU: the budget is the engine's, and its TP ranks
        split each step's tokens), between decode steps. Attention groups step in lockstep (every MoE
        layer spans them all), so a prefill chunk in any group stalls every group: with g groups each
        spending share f of its time in prefill, the time lost to decode-only steps is 1 - (1 - f)^g
        (prefills land in independent steps). With prefill "mixed" the decodes ride in those steps (one step
        of the chunk plus their attention, P), so the lost time still yields decode tokens at D / P of the
        decode-only rate (D the decode step); with "stalled" they yield none in them. With "separate" the
        prompts are prefilled in passes of their own instead (colocated_separate)."""
        d = self.decode(layout, batch, w, o)
        if o.prefill in SEPARATE_MODES:
            return self.colocated_separate(d, w, o, chunk)
        p = self.prefill(layout, chunk / layout.tp, w, replace(o, offload=False))
        # "mixed": the running decodes ride in the chunk's step, each yielding its tokens; the step runs the
        # chunk and the decodes' attention over their KV (their few rows add little to the chunk's GEMMs)
        mixed = o.prefill == "mixed"
        mixed_ms = p.step_ms + (d.breakdown_ms.get("attention", 0.0) if mixed else 0.0)
        prompts_per_s = p.input_tokens_per_s_per_gpu / w.isl * p.step_ms / mixed_ms  # of a GPU doing nothing else
        dec, groups = d.output_tokens_per_s_per_gpu, layout.attention_groups
        riding = d.step_ms / mixed_ms if mixed else 0.0  # decode rate while stalled, share of decode-only
        lo, hi = 0.0, dec  # out = dec x (kept + (1 - kept) x riding), kept = (1 - share(out))^groups: falls with out
        for _ in range(60):
            out = (lo + hi) / 2
            kept = (1 - min(1.0, out / w.osl / prompts_per_s)) ** groups
            lo, hi = (out, hi) if out < dec * (kept + (1 - kept) * riding) else (lo, out)
        out = lo
        stalled = 1 - out / dec
        return Prediction("colocated", layout, batch, d.step_ms, ttft_ms=p.ttft_ms / max(1e-9, 1 - stalled),
                          tpot_ms=d.tpot_ms / max(1e-9, 1 - stalled), input_tokens_per_s_per_gpu=out * w.isl / w.osl,
                          output_tokens_per_s_per_gpu=out, memory=dict(d.memory), fits=d.fits and p.fits,
                          breakdown_ms=d.breakdown_ms)

    def colocated_separate(self, d: Prediction, w: Workload, o: Options, chunk: int = ENGINE_CHUNK) -> Prediction:
        """Colocated as SGLang schedules it by default (no --enable-mixed-chunk) under a closed-loop load
        (bench_serving --max-concurrency: a request is sent as one finishes). Before each iteration the
        scheduler prefills what is waiting as a forward pass of its own (get_new_batch_prefill before the
        running decode batch), without CUDA graphs (SGLang captures decode only unless
        --enable-piecewise-cuda-graph), so a prefill pass reads every weight again for the few prompts that
        arrived, not a large chunk. A decode step of an attention group of C sequences finishes a = C x
        mtp_accept / osl of them on average, each replaced at once; the number finishing in a step is read
        as Poisson: a pass follows a step with probability q = 1 - e^-a and carries a / q prompts. A pass is
        never followed by another (its prompts finish nothing), so q / (1 + q) of a group's forwards are
        passes and each decode step costs D + q x pass on one group. Attention groups step in lockstep
        (every MoE layer spans them all), so a forward with a pass in any of the g groups (taken as
        independent) lasts the pass (max(pass, decode step); the other groups decode in it) and the group
        that prefills yields no token in it. A pass's prompts are prefilled by their group's GPUs (attention,
        projections, dense layers: the prompts' tokens over tp GPUs), while the routed experts and their
        dispatch and combine take them over every group's GPUs (tp x g). With "separate-compiled" (ROCm ATOM's
        server) the passes are scheduled so but run compiled: their kernels without an eager layer's host time."""
        lay, D = d.layout, d.step_ms
        a = d.batch * lay.tp * o.mtp_accept / w.osl  # sequences of an attention group finishing per decode step
        q = -math.expm1(-a)
        if q <= 0:
            return replace(d, phase="colocated")
        g = lay.attention_groups
        tokens = a / q * w.computed_input / lay.tp  # per GPU of the group that prefills
        passes = max(1, math.ceil(tokens * lay.tp / chunk - 1e-9))  # the scheduler's budget covers its TP group
        pass_o = o.pass_options()
        p = self.prefill(lay, tokens / passes, w, pass_o)
        pass_ms = p.step_ms
        if g > 1:  # the routed experts and their dispatch take the pass's tokens over every group's GPUs
            spread = self.prefill(lay, tokens / passes / g, w, pass_o).breakdown_ms
            moe = ("experts", "communication")
            pass_ms += sum(spread.get(k, 0.0) - p.breakdown_ms.get(k, 0.0) for k in moe)
        pass_ms = max(passes * pass_ms, D)
        # share of forwards with a pass in some group: 1 - (1 - q / (1 + q))^g = 1 - (1 + q)^-g
        busy = -math.expm1(-g * math.log1p(q))
        forward_ms = (1 - busy) * D + busy * pass_ms
        out = d.output_tokens_per_s_per_gpu * D / (1 + q) / forward_ms  # a group decodes 1 / (1 + q) of its forwards
        tpot = forward_ms * (1 + q) / o.mtp_accept
        return Prediction("colocated", lay, d.batch, D, ttft_ms=D / 2 + pass_ms, tpot_ms=tpot,
                          input_tokens_per_s_per_gpu=out * w.isl / w.osl, output_tokens_per_s_per_gpu=out,
                          memory=dict(d.memory), fits=d.fits and p.fits, breakdown_ms=d.breakdown_ms)

    def offline(self, layout: Layout, prompts: int, w: Workload, o: Options, chunk: int = 4096) -> tuple[float, float]:
        """(seconds, decode step seconds) for `prompts` prompts submitted at once, as the offline `LLM`
        runs them: prefill in steps of `chunk` tokens (the first token of each comes out of its
        prefill), then osl - 1 decode steps of all of them."""
        total = prompts * w.computed_input
        seconds = 0.0
        while total > 0:
            tokens = min(chunk, total)
            seconds += self.prefill(layout, tokens, w, o).step_ms / 1e3
            total -= tokens
        step = self.decode(layout, prompts, w, o).step_ms / 1e3
        return seconds + (w.osl - 1) * step, step

    def disaggregated(self, pre: Prediction, dec: Prediction, gpus: int, w: Workload) -> Prediction:
        """Split `gpus` between prefill (pre's layout) and decode (dec's) in whole instances, in the
        ratio that balances prompts prefilled and prompts decoded per second; best split wins."""
        p_size, d_size = pre.layout.gpus, dec.layout.gpus
        best = None
        for n_p in range(p_size, gpus, p_size):
            n_d = (gpus - n_p) // d_size * d_size
            if n_d <= 0:
                continue
            prompts = min(n_p * pre.input_tokens_per_s_per_gpu / w.isl, n_d * dec.output_tokens_per_s_per_gpu / w.osl)
            if best is None or prompts > best[0]:
                best = (prompts, n_p, n_d)
        if best is None:
            raise ValueError(f"{gpus} GPUs cannot hold a prefill instance of {p_size} and a decode instance of {d_size}")
        prompts, n_p, n_d = best
        used = n_p + n_d
        # each decode GPU receives its shard of the prompt's KV: isl tokens, a sliding-window layer's only its
        # window's (the decode side's own per-token figure is averaged over isl + osl tokens)
        transfer_ms = w.isl * kv_bytes_per_token(self.model, dec.layout, self.prec, w.isl) / (self.hw.scaleout_gbs * 1e9) * 1e3
        return Prediction("disaggregated", dec.layout, dec.batch, dec.step_ms, ttft_ms=pre.ttft_ms + transfer_ms,
                          tpot_ms=dec.tpot_ms, input_tokens_per_s_per_gpu=prompts * w.isl / used,
                          output_tokens_per_s_per_gpu=prompts * w.osl / used,
                          memory={"prefill": pre.memory, "decode": dec.memory}, fits=pre.fits and dec.fits,
                          breakdown_ms={"prefill": pre.breakdown_ms, "decode": dec.breakdown_ms},
                          prefill_gpus=n_p, decode_gpus=n_d, sides=(pre, dec))
