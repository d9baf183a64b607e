"""Builds the model of a checkpoint, owns this rank's KV cache, and runs one group batch per step.

Shape legend: N tokens in the step, S sequences with sample=True, V vocab, H hidden.
"""

from __future__ import annotations

import gc
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from moeserve.config import EngineConfig
from moeserve.core.step_plan import GroupBatch, PromptLogprobs, ScheduledSeq
from moeserve.dense.attention_metadata import AttentionMetadata, build_attention_metadata, empty_metadata
from moeserve.dispatch.base import Dispatcher
from moeserve.dispatch.local import LocalDispatcher
from moeserve import envs
from moeserve.engine.cuda_graphs import DecodeGraphs, capture_sizes
from moeserve.engine.host_copy import to_device
from moeserve.engine.host_memory import host_memory_available
from moeserve.engine.layout_check import load_plan
from moeserve.engine.sampler import prompt_logprobs
from moeserve.engine.process_groups import RankEnv
from moeserve.engine.step_inputs import StepInputs
from moeserve.kernels.registry import make_kernel_set, rank_device, resolve, resolve_dtype
from moeserve.kernels.reference.fp8_quant import FP8_DTYPE
from moeserve.models.checkpoint import load_hf_config
from moeserve.models.quantization import open_checkpoint
from moeserve.models.online_fp8 import quantize_fp8
from moeserve.models.registry import check_layout, model_class
from moeserve.parallel_state import ParallelContext

logger = logging.getLogger(__name__)

# prompt logprobs: logits of at most this many prompt positions exist at once ([rows, V] fp32), so a
# long prompt chunk never holds a [chunk, V] logits tensor
PROMPT_LOGITS_ROWS = 256


def resolve_model_dir(engine_config: EngineConfig) -> Path:
    """The checkpoint directory; None means the built-in model (made on first use)."""
    if engine_config.model.model is not None:
        return Path(engine_config.model.model)
    from moeserve.engine.builtin_model import builtin_model_dir

    return Path(builtin_model_dir())


def apply_placement(model, plan, plan_path: str, ctx: ParallelContext, device: torch.device | str = "cpu") -> None:
    """Give MoE layer l (in model order) slots phy2log[l] and the plan's replica choice (its tables on
    `device`, where the router's ids are); before loading.
    The plan's experts, MoE layers and ranks were checked against the model with its layout
    (`check_layout`)."""
    from moeserve.placement.routing_torch import slot_map_for

    layers = list(model.moe_layers().values())
    if plan.layer_ids is not None and list(plan.layer_ids) != list(model.moe_layers()):
        raise ValueError(
            f"placement {plan_path} is for MoE layers {list(plan.layer_ids)}, the model's are {list(model.moe_layers())}"
        )
    for index, moe in enumerate(layers):
        moe.set_placement(plan.phy2log[index].tolist(), slot_map_for(plan, index, ctx.ep_rank, device))
    for moe in model.mtp_moe_layers() if hasattr(model, "mtp_moe_layers") else ():
        # the MTP layer's experts are no plan's: any valid layout of the same slots serves, the last layer's
        moe.set_placement(plan.phy2log[-1].tolist(), slot_map_for(plan, len(layers) - 1, ctx.ep_rank, device))


def default_dispatcher(model, engine_config: EngineConfig, ctx: ParallelContext, cuda_graphs: bool = False) -> Dispatcher:
    """LocalDispatcher with one expert rank; otherwise the --dispatch backend from the registry
    (cuda_graphs: decode steps will be captured, so `auto` picks a backend that can be)."""
    slots = {moe.num_slots for moe in model.moe_layers().values()} or {0}
    if len(slots) != 1:
        raise ValueError(f"MoE layers disagree on the number of physical slots: {sorted(slots)}")
    num_slots = slots.pop()
    if ctx.ep_size == 1:
        return LocalDispatcher(num_slots)
    from moeserve.dispatch.registry import StepBounds, make_dispatcher

    # the MoE layer splits a group's tokens over its tp ranks before dispatch (moe/layer.py)
    step_tokens = -(-engine_config.scheduler.max_num_batched_tokens // ctx.tp_size)
    bounds = StepBounds(timeout_s=engine_config.parallel.step_timeout_s, max_tokens=step_tokens)
    return make_dispatcher(engine_config.parallel.dispatch, num_slots, ctx, bounds, cuda_graphs=cuda_graphs)


@dataclass
class TokenFill:
    """Tokens the host does not know yet (async scheduling): `values` [m] int64 on the device go to rows
    `positions` of the step's input ids, replacing their PENDING_TOKEN placeholders."""

    positions: list[int]
    values: torch.Tensor

    def apply(self, input_ids: torch.Tensor) -> None:
        """input_ids [N] int64 (written in place, on the device: no read back)."""
        input_ids.index_copy_(0, to_device(self.positions, torch.int64, input_ids.device), self.values)


class ModelRunner:
    """Mutates only its KV cache; the scheduler decides which blocks each sequence owns."""

    def __init__(self, engine_config: EngineConfig, ctx: ParallelContext, dispatcher: Dispatcher | None = None):
        self.ctx = ctx
        model_dir = resolve_model_dir(engine_config)
        self.hf_config = load_hf_config(model_dir)
        # the start-up check on config.json (engine/startup_checks.py), again on the config as loaded: a rank's config
        # arrives unvalidated, and transformers fills in sizes that config.json may leave out
        plan = load_plan(engine_config.placement)
        check_layout(self.hf_config, ctx.tp_size, ctx.ep_size, plan, f"--placement {engine_config.placement}")
        # the rank's device (cuda:LOCAL_RANK on GPUs) and kernel set, chosen once (kernels/registry.py);
        # a CPU set sets torch's threads here
        device, kernels = resolve(engine_config.device.device, engine_config.device.kernels)
        env = RankEnv.from_environ()
        self.device = rank_device(device, env.local_rank if env is not None else 0)
        self.kernels = make_kernel_set(kernels, self.device, engine_config, ctx, self.hf_config.hidden_size)
        architecture = (getattr(self.hf_config, "architectures", None) or ["<none in config.json>"])[0]
        self.dtype = resolve_dtype(engine_config.model.dtype, device)
        # --kv-cache-dtype fp8: K/V (MLA's latents) stored as e4m3, read back upcast by the kernels
        self.kv_dtype = FP8_DTYPE if engine_config.cache.kv_cache_dtype == "fp8" else self.dtype
        self.model = model_class(architecture)(self.hf_config, ctx, self.dtype)
        if engine_config.speculative.is_mtp:  # the draft model: the checkpoint's MTP layer (models/mtp.py)
            self.model.enable_mtp()
        if plan is not None:
            apply_placement(self.model, plan, engine_config.placement, ctx, self.device)
        # decode steps replay CUDA graphs unless --enforce-eager (MOESERVE_DECODE_GRAPHS_EAGER: the same
        # padded path with eager replays, on any device)
        self.eager_replays = envs.DECODE_GRAPHS_EAGER.get()
        want_graphs = not engine_config.device.enforce_eager and (self.device.type == "cuda" or self.eager_replays)
        self.model.set_dispatcher(dispatcher or default_dispatcher(self.model, engine_config, ctx, want_graphs))
        first_rank = ctx.tp_rank == 0 and ctx.ep_rank == 0
        reader = open_checkpoint(model_dir, self.hf_config, self.kernels.fp8_block_weights, progress=first_rank)
        self.model.load_weights(reader)
        self.model.eval()
        if engine_config.model.quantization == "fp8":  # on the device layer by layer (models/online_fp8.py)
            quantize_fp8(self.model, self.device)
        self.weight_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        if hasattr(reader, "summary") and first_rank:
            logger.info("%s", reader.summary(self.dtype))
        logger.debug("weights of rank %d (tp rank %d of %d, ep rank %d of %d): %.1f MiB (%d bytes)",
                    ctx.ep_rank if ctx.ep_size > 1 else ctx.tp_rank, ctx.tp_rank, ctx.tp_size, ctx.ep_rank,
                    ctx.ep_size, self.weight_bytes / 2**20, self.weight_bytes)
        if self.device.type == "cuda":
            self._to_device()
        self.kernels.prepare_model(self.model, engine_config)  # bind, and the set's copies of the weights
        self.block_size = engine_config.cache.block_size
        self.max_model_len = engine_config.model.max_model_len or self.hf_config.max_position_embeddings
        self.num_blocks = engine_config.cache.num_blocks or self._blocks_for(engine_config.cache.kv_cache_memory_mb,
                                                                             engine_config.device.gpu_memory_utilization)
        capacity = self.num_blocks * self.block_size
        if self.max_model_len > capacity:
            # a longer sequence could never finish; refusing it up front (a 400 before any block is
            # taken) beats failing it mid-generation. vLLM refuses to start; we serve the shorter length
            logger.warning(
                "max_model_len %d is more than the KV cache holds for one sequence (%d blocks of %d tokens): "
                "serving a max_model_len of %d; raise --kv-cache-blocks or --kv-cache-memory-mb for longer contexts",
                self.max_model_len, self.num_blocks, self.block_size, capacity)
            self.max_model_len = capacity
        # persistent input buffers on a GPU (and wherever decode graphs run), with one KV block more than
        # the scheduler hands out: where padding rows write (engine/step_inputs.py)
        graphs_on = want_graphs and self._graphs_possible()
        use_inputs = self.device.type == "cuda" or graphs_on
        self.kv_caches = self._allocate_kv(self.num_blocks + int(use_inputs))
        self.max_num_seqs = engine_config.scheduler.max_num_seqs
        sched = engine_config.scheduler
        self.inputs: StepInputs | None = None
        if use_inputs:
            self.inputs = StepInputs(sched.max_num_batched_tokens, sched.max_num_seqs,
                                     -(-self.max_model_len // self.block_size) + 1, self.block_size, self.device,
                                     pad_block=self.num_blocks)
        self.last_forward: tuple[torch.Tensor, AttentionMetadata] | None = None
        self.kernels.start_steps(self.sample_forwards)
        self.graphs: DecodeGraphs | None = None
        if graphs_on:  # captured by capture_graphs(), once the worker has hooked the MoE layers
            self.graphs = DecodeGraphs(self._graph_forward, self.inputs,
                                       capture_sizes(sched.max_num_seqs, sched.max_num_batched_tokens),
                                       self.max_model_len, eager=self.device.type != "cuda" or self.eager_replays)

    def capture_graphs(self) -> None:
        """Capture (again) every decode graph: at start-up, and after anything a graph holds changed
        (a new expert placement's slot maps). A collective on a multi-rank engine: every rank calls it
        in the same step."""
        if self.graphs is None:
            return
        with torch.inference_mode():
            try:
                self.graphs.capture()
            except torch.cuda.OutOfMemoryError:
                raise MemoryError(
                    f"out of GPU memory on {self.device} while capturing the decode CUDA graphs: lower "
                    "--gpu-memory-utilization or --max-num-seqs, or run with --enforce-eager") from None

    def _graphs_possible(self) -> bool:
        """Whether the decode path can be captured: a graph-safe kernel set and dispatcher (decided from
        the configuration alone, alike on every rank)."""
        dispatcher = self.model.dispatcher
        if getattr(self.model, "mtp", None) is not None:
            # the MTP draft layer reads every step's hidden states, which a graph's replay does not keep;
            # n-gram speculation keeps graphs for plain decode steps (verify steps run eagerly)
            logger.info("decode steps run eagerly: the MTP draft layer reads each step's hidden states")
            return False
        if not self.kernels.captures_decode(self.dtype):
            logger.info("decode steps run eagerly: the %s kernel set reads counts on the host in %s", self.kernels.name,
                        self.dtype)
            return False
        if not getattr(dispatcher, "graph_safe", False):
            logger.info("decode steps run eagerly: %s dispatch reads counts on the host (use --dispatch a2a_ll or "
                        "auto for CUDA graphs)", type(dispatcher).__name__)
            return False
        return True

    def _graph_forward(self, meta: AttentionMetadata, rows: int) -> torch.Tensor:
        """What a decode graph of `rows` rows captures: the forward over the persistent buffers and the LM
        head on every row -> logits [rows, V] fp32. rows is also the dispatch bound (max_tokens)."""
        return self.model.compute_logits(self.model(meta, self.kv_caches, rows))

    def _allocate_kv(self, blocks: int) -> list[list[torch.Tensor]]:
        """The KV cache of `blocks` blocks for every KV layer. A cache that cannot fit is one line naming
        the flags, before it is allocated where this can be known (host memory: /proc/meminfo's
        MemAvailable; a CPU allocation that would not fit otherwise ends in the kernel's OOM killer)."""
        need = blocks * self._block_bytes()
        hint = "lower --kv-cache-blocks or --kv-cache-memory-mb"
        if self.device.type == "cpu":
            available = host_memory_available()
            if available is not None and need > available:
                raise MemoryError(
                    f"the KV cache of {blocks} blocks takes {need} bytes a rank, more than the {available} bytes "
                    f"of host memory available: {hint}")
        try:
            return [
                [torch.zeros(shape, dtype=self.kv_dtype, device=self.device)
                 for shape in self.model.kv_cache_shape(blocks, self.block_size)]
                for _ in range(self.num_kv_layers)
            ]
        except (torch.OutOfMemoryError, RuntimeError) as e:
            if not isinstance(e, torch.OutOfMemoryError) and "alloc" not in str(e):
                raise
            raise MemoryError(f"out of memory on {self.device} allocating the KV cache of {blocks} blocks "
                              f"({need} bytes): {hint}") from None

    def _to_device(self) -> None:
        """The loaded weights onto this rank's GPU; an out-of-memory start is one line."""
        free, total = torch.cuda.mem_get_info(self.device)
        try:
            self.model.to(self.device)
        except torch.cuda.OutOfMemoryError:
            raise MemoryError(
                f"out of GPU memory on {self.device}: the weights take {self.weight_bytes} bytes, {free} bytes were "
                f"free of {total}; use more GPUs (--tp / --ep) or a smaller --dtype") from None

    @property
    def num_kv_layers(self) -> int:
        """KV-cache layers: one per decoder layer, one more for an MTP draft layer."""
        return getattr(self.model, "num_kv_layers", self.hf_config.num_hidden_layers)

    def _block_bytes(self) -> int:
        per_layer = self.model.kv_cache_shape(1, self.block_size)
        return sum(math.prod(s) for s in per_layer) * self.num_kv_layers * self.kv_dtype.itemsize

    def _blocks_for(self, memory_mb: int, utilization: float = 0.9) -> int:
        """KV blocks of this rank: on a GPU what is free of `utilization` of its memory after the
        weights (vLLM's --gpu-memory-utilization), else --kv-cache-memory-mb."""
        block_bytes = self._block_bytes()
        if self.device.type == "cuda":
            gc.collect()  # an earlier engine of this process (shut down) may still hold its cache through a cycle
            torch.cuda.empty_cache()  # memory this process freed but torch still caches counts as free
            free, total = torch.cuda.mem_get_info(self.device)
            budget = int(utilization * total) - (total - free)  # what others and our weights use is gone
            blocks = max(0, budget) // block_bytes
            if blocks < 1:
                raise MemoryError(
                    f"out of GPU memory on {self.device}: weights {self.weight_bytes} bytes, KV cache needs "
                    f"{block_bytes} bytes a block, {free} bytes free of {total} with --gpu-memory-utilization "
                    f"{utilization}: raise it, lower --max-model-len, or use more GPUs")
            return int(blocks)
        blocks = memory_mb * 2**20 // block_bytes
        if blocks < 1:
            raise ValueError(
                f"--kv-cache-memory-mb {memory_mb} holds no KV block of {block_bytes} bytes: "
                "raise it or lower --block-size"
            )
        return int(blocks)

    def execute(self, batch: GroupBatch, max_tokens: int | None = None) -> torch.Tensor:
        """Run one step of this rank's attention group -> logits [S, V] fp32, in batch order.

        max_tokens: StepPlan.max_group_tokens, identical on every rank, so dispatch backends need not
        agree on a global size with a collective of their own (None: they do).
        An empty batch still runs every layer with zero tokens, so every collective lines up.
        """
        return self.execute_step(batch, max_tokens)[0]

    @torch.inference_mode()
    def execute_step(
        self, batch: GroupBatch, max_tokens: int | None = None, prompt_top_n: Callable[[str], int] | None = None,
        decode_step: bool = False, fill: TokenFill | None = None,
    ) -> tuple[torch.Tensor, list[PromptLogprobs]]:
        """`execute`, plus the prompt logprobs of the seqs with `prompt_targets`.

        decode_step: every group of the step decodes (StepPlan.is_decode, the same on every rank): then
        a decode graph of max_tokens' bucket replays it, where one was captured.
        fill: the batch's pending tokens, filled into the input ids on the device before the forward.

        Every TP rank of the group computes the same prompt-logit rows (compute_logits gathers the
        vocabulary across TP ranks, so the calls must line up), PROMPT_LOGITS_ROWS at a time; only
        a rank given `prompt_top_n` (request id -> top-N, the sampling rank) reduces them to
        logprobs; the others return [].
        """
        assert max_tokens is None or max_tokens >= batch.num_tokens, "max_tokens below this group's tokens"
        bound = batch.num_tokens if max_tokens is None else max_tokens
        self.last_forward = None
        if decode_step and self.graphs is not None and self.graphs.covers(len(batch.seqs), bound):
            with self.kernels.step(batch.num_tokens):
                return self.graphs.run(batch, bound, fill), []
        with self.kernels.step(batch.num_tokens):
            hidden, meta = self._forward(batch, max_tokens, fill)
            logits = self.model.compute_logits(hidden[meta.sample_index])
        # the MTP draft layer reads the step's hidden states and metadata after sampling (engine/mtp_drafter.py)
        self.last_forward = (hidden, meta) if getattr(self.model, "mtp", None) is not None else None
        prompt: list[PromptLogprobs] = []
        row = 0
        for seq in batch.seqs:
            if seq.prompt_targets:
                n = prompt_top_n(seq.request_id) if prompt_top_n is not None else 0
                out = PromptLogprobs(seq.request_id, seq.start_pos + 1)
                for lo in range(0, len(seq.prompt_targets), PROMPT_LOGITS_ROWS):
                    targets = seq.prompt_targets[lo : lo + PROMPT_LOGITS_ROWS]
                    rows = self.model.compute_logits(hidden[row + lo : row + lo + len(targets)])  # [R, V] fp32
                    if prompt_top_n is not None:
                        out.entries.extend(prompt_logprobs(rows, targets, n))
                if prompt_top_n is not None:
                    prompt.append(out)
            row += seq.num_tokens
        return logits, prompt

    def _forward(self, batch: GroupBatch, max_tokens: int | None = None, fill: TokenFill | None = None
                 ) -> tuple[torch.Tensor, AttentionMetadata]:
        """hidden [N, H] of the batch's tokens (their K/V written to the cache), and its metadata."""
        if not batch.seqs:
            meta = empty_metadata(self.block_size, self.device)
        elif self.inputs is not None:
            meta = self.inputs.prepare(batch)
        else:
            meta = build_attention_metadata(batch, self.block_size)
        if fill is not None:
            fill.apply(meta.input_ids)
        return self.model(meta, self.kv_caches, max_tokens), meta

    def sample_forwards(self, max_tokens: int) -> tuple[list[Callable[[], torch.Tensor]], int]:
        """Callables each running one forward on this rank's cache -> logits: a prefill of a few
        sequences (odd lengths: partial blocks, uneven rows per expert), a decode step over them, and
        one prefill of up to `max_tokens` tokens; and the largest step they cover (what the KV pool
        holds). A kernel set runs them to check a way of running steps (kernels/cpu/step_threads.py).
        They use the first KV blocks; nothing is scheduled yet, and the scheduler hands out blocks
        that are written before they are read."""
        gen = torch.Generator().manual_seed(0)
        limit = min(self.max_model_len, self.num_blocks * self.block_size)

        def seqs_of(lengths: tuple[int, ...]) -> list[tuple[str, list[int], list[int]]]:
            seqs, block = [], 0
            for length in lengths:
                length = min(length, limit - 1)
                blocks = -(-(length + 1) // self.block_size)
                if length < 1 or block + blocks > self.num_blocks:
                    continue
                ids = torch.randint(self.hf_config.vocab_size, (length + 1,), generator=gen).tolist()
                seqs.append((f"thread-check-{len(seqs)}", ids, list(range(block, block + blocks))))
                block += blocks
            return seqs

        def logits(batch: GroupBatch) -> Callable[[], torch.Tensor]:
            def run() -> torch.Tensor:
                hidden, meta = self._forward(batch)
                return self.model.compute_logits(hidden[meta.sample_index])

            return run

        checks: list[Callable[[], torch.Tensor]] = []
        max_tokens = max(0, min(max_tokens, limit - 1))
        if max_tokens < 1:  # no room for a check
            return checks, 0
        few = seqs_of(tuple(n for n in (37, 11, 3, 1) if n <= max_tokens) or (max_tokens,))
        if few:
            checks.append(logits(GroupBatch(0, [ScheduledSeq(r, ids[:-1], 0, t, True) for r, ids, t in few])))
            checks.append(logits(GroupBatch(0, [ScheduledSeq(r, ids[-1:], len(ids) - 1, t, True) for r, ids, t in few])))
        largest = seqs_of((max_tokens,))
        if largest:
            checks.append(logits(GroupBatch(0, [ScheduledSeq(r, ids[:-1], 0, t, True) for r, ids, t in largest])))
        return checks, max_tokens
