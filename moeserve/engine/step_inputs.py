"""Persistent input buffers of a rank's steps (vLLM's persistent batch, smaller): the O(batch) metadata
of every step is written into the same device tensors, in place.

    inputs = StepInputs(max_tokens, max_seqs, max_blocks, block_size, device, pad_block)
    meta = inputs.prepare(batch)              # eager step: views [:N], [:B], [:B, :C] of the buffers
    meta = inputs.prepare(batch, pad_to=b)    # a decode step padded to a CUDA-graph bucket of b rows

The host fills one pinned staging buffer (numpy views, no torch op per field) and queues one
non-blocking copy per field onto the current stream, ahead of the step's kernels: the host never
waits, and a CUDA graph captured over the buffers reads each step's values at replay. Two staging
buffers alternate, each guarded by an event, so the host may fill step N+1's while step N's copies
are still queued (the host one step ahead, engine/engine_core.py).

Padding (pad_to): rows past the batch are sequences of one token at position 0 that write their key
into `pad_block` (a KV block the scheduler never hands out) and attend to it alone, so they read and
write nothing a real sequence owns; their outputs are dropped. On a CPU the buffers are plain tensors
written in place (how tests run the padded path).

Shape legend: N tokens, B sequences, C block-table columns in use, Cmax = max_blocks, S sampled rows.
"""

from __future__ import annotations

import numpy as np
import torch

from moeserve.core.step_plan import GroupBatch
from moeserve.dense.attention_metadata import AttentionMetadata, host_batch

FIELDS = ("input_ids", "positions", "slot_mapping", "token_valid", "query_start", "seq_lens", "sample_index",
          "block_tables")


class StepInputs:
    """Mutates only its buffers; `prepare` returns metadata viewing them (valid until the next prepare,
    in stream order on a GPU)."""

    def __init__(self, max_tokens: int, max_seqs: int, max_blocks: int, block_size: int,
                 device: torch.device, pad_block: int):
        self.max_tokens, self.max_seqs, self.max_blocks = max_tokens, max_seqs, max_blocks
        self.block_size, self.device, self.pad_block = block_size, device, pad_block
        i64 = dict(dtype=torch.int64, device=device)
        self.input_ids = torch.zeros(max_tokens, **i64)
        self.positions = torch.zeros(max_tokens, **i64)
        self.slot_mapping = torch.full((max_tokens,), pad_block * block_size, **i64)
        # 1 for the step's tokens, 0 for padding rows: what routing counters weigh tokens by (engine/rebalance.py)
        self.token_valid = torch.zeros(max_tokens, **i64)
        self.query_start = torch.zeros(max_seqs + 1, **i64)
        self.seq_lens = torch.ones(max_seqs, **i64)
        # sampled rows: one per sequence, or a verify's k + 1 (speculative decoding): at most the step's tokens
        self.sample_index = torch.zeros(max(max_seqs, max_tokens), **i64)
        self.block_tables = torch.full((max_seqs, max_blocks), pad_block, **i64)
        self._sizes = (max_tokens, max_tokens, max_tokens, max_tokens, max_seqs + 1, max_seqs, len(self.sample_index),
                       max_seqs * max_blocks)
        total = sum(self._sizes)
        pinned = device.type == "cuda"
        self._staging = [torch.zeros(total, dtype=torch.int64, pin_memory=pinned) for _ in range(2 if pinned else 1)]
        self._events: list[torch.cuda.Event | None] = [None] * len(self._staging)
        self._next = 0

    def prepare(self, batch: GroupBatch, pad_to: int | None = None, max_seq_len: int | None = None) -> AttentionMetadata:
        """The step's metadata over the buffers. pad_to: a decode step (one token per sequence) padded
        to this many rows, with the full block-table width (what a CUDA graph was captured over);
        max_seq_len: the bound recorded in the metadata then (the graph's, e.g. max_model_len)."""
        host = host_batch(batch)
        n_new, starts = host.n_new, host.starts
        B, N = len(batch.seqs), int(n_new.sum())
        seq_lens = starts + n_new
        L = int(seq_lens.max()) if B else 0
        C = max(-(-L // self.block_size), 1)
        rows = B if pad_to is None else pad_to
        if pad_to is not None:
            assert N == B <= pad_to <= self.max_seqs, "only decode steps pad to a bucket"
        if N > self.max_tokens or rows > self.max_seqs or C > self.max_blocks:
            raise ValueError(f"a step of {N} tokens, {B} sequences and {C} blocks per sequence does not fit the "
                             f"input buffers ({self.max_tokens}, {self.max_seqs}, {self.max_blocks})")
        query_start = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(n_new, out=query_start[1 : B + 1])
        query_start[B + 1 :] = N + np.arange(1, rows - B + 1)  # padding rows: one token each
        seq_of_token = np.repeat(np.arange(B), n_new)
        positions = np.arange(N, dtype=np.int64) - query_start[seq_of_token] + starts[seq_of_token]
        tables = host.tables
        slots = tables[seq_of_token, positions // self.block_size] * self.block_size + positions % self.block_size
        T = N + (rows - B)  # tokens with padding
        # a verify (speculative decoding) samples its newest token's row and each draft's
        sample = [r for i, s in enumerate(batch.seqs) for r in range(int(query_start[i + 1]) - s.num_sampled_rows,
                                                                      int(query_start[i + 1]))]
        if pad_to is not None:
            sample = list(range(rows))  # a graph computes every row's logits; the caller picks the sampled
        width = C
        table_rows = np.full((rows, width), self.pad_block, dtype=np.int64)
        used = min(tables.shape[1], width)
        table_rows[:B, :used] = tables[:, :used]
        values = {
            "input_ids": np.fromiter((t for s in batch.seqs for t in s.token_ids), dtype=np.int64, count=N),
            "positions": positions,
            "slot_mapping": slots,
            "token_valid": np.ones(N, dtype=np.int64),
            "query_start": query_start,
            "seq_lens": np.concatenate([seq_lens, np.ones(rows - B, dtype=np.int64)]),
            "sample_index": np.asarray(sample, dtype=np.int64),
            "block_tables": table_rows.reshape(-1),
        }
        pad = {"input_ids": 0, "positions": 0, "slot_mapping": self.pad_block * self.block_size}
        counts = {"input_ids": T, "positions": T, "slot_mapping": T, "token_valid": T, "query_start": rows + 1, "seq_lens": rows,
                  "sample_index": len(sample), "block_tables": rows * width}
        self._write(values, pad, counts, rows, width)
        full = pad_to is not None
        return AttentionMetadata(
            input_ids=self.input_ids[:T],
            positions=self.positions[:T],
            slot_mapping=self.slot_mapping[:T],
            query_start=self.query_start[: rows + 1],
            seq_lens=self.seq_lens[:rows],
            block_tables=self.block_tables[:rows] if full else self.block_tables[:rows, :width],
            sample_index=self.sample_index[: len(sample)],
            block_size=self.block_size,
            max_query_len=int(n_new.max()) if B else 0,
            max_seq_len=max_seq_len if full and max_seq_len is not None else L,
            host=None if full else host,
        )

    def graph_metadata(self, rows: int, max_seq_len: int) -> AttentionMetadata:
        """The metadata a decode graph of `rows` rows is captured over: full views of the buffers (their
        values at replay are whatever `prepare(batch, pad_to=rows)` wrote last)."""
        return AttentionMetadata(
            input_ids=self.input_ids[:rows], positions=self.positions[:rows], slot_mapping=self.slot_mapping[:rows],
            query_start=self.query_start[: rows + 1], seq_lens=self.seq_lens[:rows],
            block_tables=self.block_tables[:rows], sample_index=self.sample_index[:rows],
            block_size=self.block_size, max_query_len=1, max_seq_len=max_seq_len, host=None,
        )

    def _write(self, values: dict[str, np.ndarray], pad: dict[str, int], counts: dict[str, int], rows: int,
               width: int) -> None:
        """Every field's first counts[field] values (real, then padding) into its buffer: through the
        pinned staging buffer on a GPU (one non-blocking copy each), in place on a CPU."""
        slot = self._next
        self._next = (self._next + 1) % len(self._staging)
        event = self._events[slot]
        if event is not None and not event.query():  # its copies of two steps ago have not run yet
            event.synchronize()
        staging = self._staging[slot].numpy()
        offset = 0
        for name, size in zip(FIELDS, self._sizes):
            value, n = values[name], counts[name]
            chunk = staging[offset : offset + n]
            chunk[: value.shape[0]] = value
            chunk[value.shape[0] :] = pad.get(name, 0)
            src = self._staging[slot][offset : offset + n]
            if name == "block_tables":
                self.block_tables[:rows, :width].copy_(src.view(rows, width), non_blocking=True)
            else:
                getattr(self, name)[:n].copy_(src, non_blocking=True)
            offset += size
        if self.device.type == "cuda":
            self._events[slot] = torch.cuda.Event()
            self._events[slot].record()
