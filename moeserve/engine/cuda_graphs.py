"""CUDA graphs of the decode forward, one per batch-size bucket (vLLM's piecewise-free "full" decode graph).

    graphs = DecodeGraphs(runner, inputs, buckets)   # captures at start-up, largest bucket first
    graphs.covers(num_seqs, max_tokens)              # a decode step of this size has a bucket
    logits = graphs.run(batch, max_tokens)           # pad to the bucket, replay -> [S, V] fp32

A decode step (one new token per sequence, no prompt logprobs) is padded up to the smallest bucket that
holds the step's largest group (plan.max_group_tokens: the same bucket on every rank, so every rank
replays the same collectives), its inputs written into the persistent buffers the graph was captured
over (engine/step_inputs.py), and the graph replayed: one launch for the whole forward and the LM head,
instead of thousands of kernel launches from Python. Prefill and mixed steps run eagerly.

Buckets (vLLM's): 1, 2, 4, 8, then every multiple of 8 up to max_num_seqs (and max_num_seqs itself).
All graphs share one memory pool, captured from the largest down so the smaller reuse its blocks.
Capture needs every op of the decode path to be capturable: no host read (tests/engine/test_host_reads.py),
no host tensor copied in, a kernel set and a dispatcher marked graph-safe (the triton and torch sets;
`local` and `a2a_ll` dispatch). `--enforce-eager` turns graphs off.

The replay can also run without CUDA (`EagerReplay`: the captured function is called again over the same
buffers): how tests check on a CPU that padding to a bucket never changes a token, and what
MOESERVE_DECODE_GRAPHS_EAGER=1 selects.

Shape legend: b bucket rows, B sequences of the step, S sampled sequences, V vocab, H hidden.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable
from typing import Protocol

import torch

from moeserve.core.step_plan import GroupBatch
from moeserve.engine.host_copy import to_device

logger = logging.getLogger(__name__)

WARMUP_RUNS = 2  # eager runs per bucket before its capture: Triton compiles, cuBLAS picks its kernels


def capture_sizes(max_num_seqs: int, max_tokens: int) -> list[int]:
    """Bucket sizes, ascending: 1, 2, 4, 8, 16, 24, ... (multiples of 8) up to the largest decode batch
    (max_num_seqs, within the step's token budget), which is itself a bucket."""
    top = max(1, min(max_num_seqs, max_tokens))
    sizes = [s for s in (1, 2, 4) if s < top] + list(range(8, top, 8))
    return sorted(set(sizes) | {top})


class Replay(Protocol):
    """One captured forward: `replay()` runs it again over the same buffers."""

    def replay(self) -> None: ...


class EagerReplay:
    """The captured function itself, called at each replay (no CUDA needed); its outputs are copied
    into the tensors it returned at capture, as a graph's replay overwrites them."""

    def __init__(self, fn: Callable[[], torch.Tensor]):
        self.fn = fn
        self.output = fn()

    def replay(self) -> None:
        self.output.copy_(self.fn())


class CudaReplay:
    """torch.cuda.CUDAGraph over `fn`, captured in `pool` on a side stream after WARMUP_RUNS eager runs."""

    def __init__(self, fn: Callable[[], torch.Tensor], pool, stream: torch.cuda.Stream):
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_RUNS):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool, stream=stream):
            self.output = fn()

    def replay(self) -> None:
        self.graph.replay()


class DecodeGraphs:
    """The runner's decode graphs. Mutates the runner's input buffers and KV cache (through replays)."""

    def __init__(self, forward: Callable, inputs, sizes: list[int], max_seq_len: int, eager: bool = False):
        """forward(meta, max_tokens) -> logits [b, V] fp32 of every row: the captured function.
        inputs: the runner's StepInputs. eager: EagerReplay instead of CUDA graphs."""
        self.forward, self.inputs, self.sizes, self.max_seq_len = forward, inputs, sizes, max_seq_len
        self.eager = eager
        self.graphs: dict[int, Replay] = {}
        self.capture_s = 0.0
        self.capture_bytes = 0

    def capture(self) -> None:
        """Capture every bucket, largest first (smaller graphs reuse the larger's pool blocks); logs the
        time and device memory it took."""
        self.graphs = {}  # a re-capture frees the old graphs first
        start = time.perf_counter()
        device = self.inputs.device
        free_before = torch.cuda.mem_get_info(device)[0] if not self.eager else 0
        pool = torch.cuda.graph_pool_handle() if not self.eager else None
        stream = torch.cuda.Stream(device) if not self.eager else None
        for rows in sorted(self.sizes, reverse=True):
            meta = self.inputs.graph_metadata(rows, self.max_seq_len)
            self._fill_padding(rows)

            def fn(meta=meta, rows=rows) -> torch.Tensor:
                meta.derived.clear()  # per-step tensors (rotary cos/sin) come from this replay's positions
                return self.forward(meta, rows)

            self.graphs[rows] = EagerReplay(fn) if self.eager else CudaReplay(fn, pool, stream)
        if not self.eager:
            torch.cuda.synchronize(device)
            self.capture_bytes = max(0, free_before - torch.cuda.mem_get_info(device)[0])
        self.capture_s = time.perf_counter() - start
        logger.info("captured %d decode CUDA graphs (batch sizes %s) in %.1f s, %.0f MiB of device memory%s",
                    len(self.graphs), _ranges(self.sizes), self.capture_s, self.capture_bytes / 2**20,
                    " (eager replays: no CUDA graph)" if self.eager else "")

    def covers(self, num_seqs: int, max_tokens: int) -> bool:
        """Whether a decode step whose largest group has max_tokens tokens has a bucket."""
        return bool(self.graphs) and max(num_seqs, max_tokens) <= self.sizes[-1]

    def bucket(self, max_tokens: int) -> int:
        return self.sizes[bisect.bisect_left(self.sizes, max(1, max_tokens))]

    def run(self, batch: GroupBatch, max_tokens: int, fill=None) -> torch.Tensor:
        """The step's sampled rows' logits [S, V] fp32: inputs padded to the bucket of max_tokens (the
        step's largest group: identical on every rank), pending tokens filled (`fill`: a TokenFill, on the
        device), then one replay."""
        rows = self.bucket(max_tokens)
        meta = self.inputs.prepare(batch, pad_to=rows, max_seq_len=self.max_seq_len)
        if fill is not None:
            fill.apply(meta.input_ids)
        graph = self.graphs[rows]
        graph.replay()
        logits = graph.output
        sampled = [i for i, s in enumerate(batch.seqs) if s.sample]
        if len(sampled) == rows:
            return logits
        if sampled == list(range(len(sampled))):
            return logits[: len(sampled)]
        return logits[to_device(sampled, torch.int64, logits.device)]

    def _fill_padding(self, rows: int) -> None:
        """Padding inputs for the capture (every row a padding row): what capture runs reads."""
        self.inputs.prepare(GroupBatch(0), pad_to=rows, max_seq_len=self.max_seq_len)


def _ranges(sizes: list[int]) -> str:
    return f"{sizes[0]}-{sizes[-1]}" if len(sizes) > 2 else ", ".join(map(str, sizes))
