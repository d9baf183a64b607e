"""The `cpu` kernel set: oneDNN-packed GEMMs, the few-row panel GEMM and the decode attention in C++
(kernels/cpu/csrc, built on first use), the expert loop and column-split linears over threads, and
the per-step choice of intra-op threads. Everything else runs the torch set's reference.

The decode step's small ops (RMSNorm with its residual add, the rotary, the router's softmax + top-k, the gather and
combine around the experts when every slot is here) are single C++ calls (kernels/cpu/small_ops.py).

All of it is process-wide CPU tuning, so it lives here and only here: torch's intra-op thread
count (set in `for_rank`), oneDNN's kernel cache size, the fork switch of SplitChooser, and the
start-up warm-up of every GEMM shape. Results equal the torch set's to fp32 rounding.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable

import torch
from torch import nn

from moeserve.config import ConfigError
from moeserve.kernels.base import KernelSet, KernelWeight, bind_kernels
from moeserve.kernels.cpu import attention as cpu_attention
from moeserve.kernels.cpu import experts as cpu_experts
from moeserve.kernels.cpu import blocked, cpu_binding, cpu_kernels, gemm, small_ops, threads
from moeserve.kernels.cpu import linear as cpu_linear
from moeserve.kernels.cpu.step_threads import MAX_WIDE_TOKENS, StepThreads, sweep_rows
from moeserve.parallel_state import SINGLE, ParallelContext

logger = logging.getLogger(__name__)

# the LM head's GEMM runs on the sampled rows, one per sequence: its kernels are built at start-up up
# to this many (a decode batch); a larger batch builds each new count once, ~0.5 ms
LM_HEAD_WARM_UP_ROWS = 64


class CpuKernels(KernelSet):
    """expert_threads: at most how many threads the expert loop and the column-split linears use
    (1 = never split). share: the rank's cores (for the per-step thread choice)."""

    name = "cpu"

    def __init__(self, device: torch.device | str = "cpu", expert_threads: int = 1, share: int = 1,
                 num_threads: int | None = None, ctx: ParallelContext = SINGLE):
        super().__init__(device)
        if self.device.type != "cpu":
            raise ConfigError(f"--kernels cpu runs on --device cpu, not {self.device}")
        if expert_threads < 1:
            raise ConfigError(f"MOESERVE_EXPERT_THREADS must be >= 1, got {expert_threads}")
        gemm.raise_primitive_cache()
        self.expert_threads, self.share, self.num_threads, self.ctx = expert_threads, share, num_threads, ctx
        self.model: nn.Module | None = None
        self.step_threads: StepThreads | None = None
        self.max_num_seqs = self.max_batched_tokens = 0

    def describe(self) -> str:
        native = "C++ few-row GEMMs and decode attention" if cpu_kernels.load() else "C++ kernels off (SDPA attention)"
        threads = torch.get_num_threads()
        return f"oneDNN GEMMs, {native}; {threads} intra-op thread{'s' if threads > 1 else ''} per rank"

    @classmethod
    def tune_engine_process(cls, config: Any) -> Any:
        return cpu_binding.pinned(config)

    @classmethod
    def build(cls) -> None:
        cpu_kernels.load()  # the C++ kernels (kernels/cpu/cpu_kernels.py); a failed build logs and falls back

    @classmethod
    def for_rank(cls, engine_config: Any, ctx: ParallelContext, hidden_size: int) -> CpuKernels:
        """Set torch's intra-op threads for this rank and pick its expert threads (kernels/cpu/threads.py)."""
        parallel = engine_config.parallel
        share = threads.cores_per_rank(parallel.ranks_per_node, parallel.reserved_cores or 0)
        current = min(torch.get_num_threads(), share)
        torch.set_num_threads(threads.intra_op_threads(hidden_size, current, parallel.num_threads))
        expert = threads.expert_threads(share, torch.get_num_threads(), parallel.expert_threads)
        return cls("cpu", expert, share, parallel.num_threads, ctx)

    def prepare_model(self, model: nn.Module, settings: Any = None) -> None:
        """Pack every weight, add column splits where they give the same bits, compile the expert
        loop, and build oneDNN's kernels of the row counts decode and short prefill steps meet now,
        not inside the first requests (the LM head sees only the sampled rows)."""
        self.model = model
        bind_kernels(model, self)
        for module in model.modules():
            state = getattr(module, "kernel_state", None)
            if isinstance(state, cpu_experts.PackedExperts):
                cpu_experts.warm_up(module, state, self.expert_threads)
            elif isinstance(state, cpu_linear.PackedLinear) and isinstance(module, KernelWeight):
                cpu_linear.enable_split(state, module.weight, getattr(module, "bias", None), self.expert_threads)
        if settings is None:
            return
        scheduler = settings.scheduler
        self.max_num_seqs, self.max_batched_tokens = scheduler.max_num_seqs, scheduler.max_num_batched_tokens
        lm_head = self._lm_head_packed()
        lm_rows = min(LM_HEAD_WARM_UP_ROWS, scheduler.max_num_seqs)
        gemm.warm_up(model, min(gemm.warm_up_rows(), scheduler.max_num_batched_tokens),
                     {id(lm_head): lm_rows} if lm_head is not None else None)

    def start_steps(self, forwards: Callable[[int], tuple[list[Callable[[], torch.Tensor]], int]]) -> None:
        """Choose intra-op threads per step (kernels/cpu/step_threads.py) where it may pay, after
        checking both ways give the same bits: forwards(max_tokens) -> (callables running forwards of
        at most max_tokens tokens, the largest step they cover); every packed GEMM is swept too."""
        assert self.model is not None, "prepare_model first"
        self.step_threads = threads.step_threads(
            self.share, self.num_threads, self.ctx, self.model, self.max_batched_tokens or MAX_WIDE_TOKENS
        )
        if self.step_threads is not None:
            self.step_threads.verify(lambda: self.thread_checks(forwards))

    def thread_checks(self, forwards: Callable[[int], tuple[list, int]]) -> list[Callable[[], torch.Tensor]]:
        """What StepThreads.verify runs both ways: the runner's forwards, then every packed GEMM at
        each row count a wide step may give it; the wide way runs no step larger than was checked."""
        checks, max_tokens = forwards(self.step_threads.max_tokens)
        self.step_threads.max_tokens = max_tokens = max(0, max_tokens)
        if max_tokens < 1:  # no room for a check: no step is small enough to run wide
            return []
        lm_head = self._lm_head_packed()  # the LM head sees only the sampled rows inside the wide region
        limits = {id(lm_head): self.max_num_seqs} if lm_head is not None else {}
        return checks + gemm.row_checks(self.model, sweep_rows(max_tokens), limits)

    def step(self, num_tokens: int) -> contextlib.AbstractContextManager:
        return self.step_threads.step(num_tokens) if self.step_threads is not None else contextlib.nullcontext()

    def elementwise(self, fn: Any, x: torch.Tensor) -> torch.Tensor:
        """In row blocks below torch's one-thread grain: the same bits at any intra-op thread count,
        which step_threads.py switches between steps (kernels/cpu/blocked.py)."""
        return blocked.by_rows(fn, x)

    def captures_decode(self, dtype: torch.dtype) -> bool:
        return False  # CPU only: its expert loop and thread choice read counts on the host

    def _lm_head_packed(self) -> torch.Tensor | None:
        state = getattr(getattr(self.model, "lm_head", None), "kernel_state", None)
        return getattr(state, "packed", None)

    # ---- weights and operations -------------------------------------------------------------------

    def prepare_linear(self, layer: KernelWeight) -> cpu_linear.PackedLinear | None:
        return cpu_linear.prepare(layer.weight)

    def prepare_experts(self, layer: Any, slots: list[int] | None = None) -> cpu_experts.PackedExperts | None:
        return cpu_experts.prepare(layer, slots)

    def linear(self, layer: KernelWeight, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return cpu_linear.run(layer.kernel_state, x, layer.weight, bias)

    def experts(self, layer: Any, batch: Any) -> torch.Tensor:
        state = layer.kernel_state
        if state is None or batch.hidden.dtype != torch.float32:
            return super().experts(layer, batch)
        return cpu_experts.run(layer, state, batch.hidden, batch.counts, self.expert_threads)

    def fused_moe(self, layer: Any, hidden: torch.Tensor, slots: torch.Tensor, topk_weights: torch.Tensor):
        """Every slot here: the C++ gather, the packed expert loop, the C++ weighted combine (kernels/cpu/small_ops.py),
        the local dispatcher's rows and sums without its chain of small torch ops; None where the loop does not run."""
        state = layer.kernel_state
        if state is None or hidden.dtype != torch.float32 or not small_ops.available():
            return None
        rows, row_pos, counts = small_ops.gather(hidden, slots, layer.num_slots)
        out = cpu_experts.run(layer, state, rows, counts, self.expert_threads)
        return small_ops.combine(out, row_pos, topk_weights)

    def softmax_topk(self, router_logits: torch.Tensor, top_k: int, renormalize: bool):
        if not small_ops.available():
            return super().softmax_topk(router_logits, top_k, renormalize)
        return small_ops.softmax_topk(router_logits, top_k, renormalize)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
        fp32 = x.dtype == weight.dtype == torch.float32 and (residual is None or residual.dtype == torch.float32)
        if not fp32 or x.shape[-1] == 0 or not small_ops.available():
            return super().rms_norm(x, weight, eps, residual)
        return small_ops.rms_norm(x, weight, eps, residual)

    def rotary(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        fp32 = x.dtype == cos.dtype == sin.dtype == torch.float32
        if not fp32 or x.dim() != 3 or x.shape[-1] % 2 or not small_ops.available():
            return super().rotary(x, cos, sin)
        return small_ops.rotary(x, cos, sin)

    def paged_attention(self, q, k_cache, v_cache, meta, scale, sliding_window=None, sinks=None) -> torch.Tensor:
        return cpu_attention.paged_attention(q, k_cache, v_cache, meta, scale, sliding_window, sinks)
