"""`RoutingRecorder`: counts logical expert choices where the router runs, window by window.

Mechanism only: it never decides when to rebalance. The runtime calls `record(layer, topk_ids,
src_rank)` after each router and `step()` once per engine step; every `steps_per_window` steps
the window closes and is written to `out_dir/window_NNNNNN.npz` (a one-window trace in the
project's format). `dump()` writes every window kept in memory (the last `max_windows`) as one
trace. What it mutates: its own counters and files under `out_dir`; it never touches the tensors
it is handed.
Shape legend: T tokens, k top-k, L MoE layers, E experts.
"""
from __future__ import annotations

import logging
import os
import threading
from collections import deque

import numpy as np

from moeserve.placement.trace import TokenSample, Trace, default_meta, save_trace

logger = logging.getLogger(__name__)


def _numpy(x) -> np.ndarray:
    """A host numpy view of an array or (CPU or device) tensor, without importing torch."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


class RoutingRecorder:
    def __init__(self, num_layers: int, num_experts: int, out_dir: str | None = None, steps_per_window: int = 100,
                 max_windows: int = 64, sample_tokens: int = 0, meta: dict | None = None) -> None:
        if steps_per_window < 1:
            raise ValueError(f"steps_per_window must be >= 1, got {steps_per_window}")
        self.num_layers, self.num_experts = num_layers, num_experts
        self.out_dir, self.steps_per_window = out_dir, steps_per_window
        self.sample_tokens = sample_tokens  # per-token records kept per window (0 = counts only)
        self.meta = default_meta(num_layers, num_experts, steps_per_window=steps_per_window, **(meta or {}))
        self.placement: np.ndarray | None = None  # int [L, P] phy2log in force, stored with each window
        self._lock = threading.Lock()
        self._windows: deque[Trace] = deque(maxlen=max_windows)
        self._recording = False
        self._next_index = 0
        self.write_errors = 0  # windows that could not be written to out_dir (kept in memory)
        self._reset_window()

    @property
    def recording(self) -> bool:
        return self._recording

    def start(self) -> None:
        """Begin a fresh window; earlier windows stay available to `dump`."""
        with self._lock:
            self._recording = True
            self._reset_window()

    def stop(self) -> None:
        """Stop counting; the partial window is kept (closed) if it saw any step."""
        with self._lock:
            if self._recording and self._steps:
                self._close_window()
            self._recording = False

    def record(self, layer: int, topk_ids, src_rank=None) -> None:
        """Add one router call. topk_ids: int [T, k] logical ids (-1 = dropped); src_rank: int [T] or int."""
        if not self._recording:
            return
        ids = _numpy(topk_ids).astype(np.int64, copy=False)
        flat = ids.reshape(-1)
        counts = np.bincount(flat[flat >= 0], minlength=self.num_experts)
        with self._lock:
            self._counts[layer] += counts[: self.num_experts]
            if self._sampled < self.sample_tokens and ids.size:
                self._sample(layer, ids.reshape(len(ids), -1), src_rank)

    def step(self) -> None:
        """One engine step ended; closes the window every `steps_per_window` steps."""
        if not self._recording:
            return
        with self._lock:
            self._steps += 1
            if self._steps >= self.steps_per_window:
                self._close_window()

    def windows(self) -> list[Trace]:
        with self._lock:
            return list(self._windows)

    def dump(self, path: str | None = None) -> str:
        """Write every kept window as one trace; returns the path (default out_dir/trace.npz)."""
        with self._lock:
            windows = list(self._windows)
        if not windows:
            raise RuntimeError("no closed window to dump: record at least one step and stop() or wait for a window")
        path = path or os.path.join(self._need_dir(), "trace.npz")
        counts = np.concatenate([w.counts for w in windows])
        samples = [w.tokens for w in windows if w.tokens is not None]
        tokens = None
        if samples:
            tokens = TokenSample(*(np.concatenate([getattr(s, f) for s in samples]) for f in ("layer", "topk", "rank", "token_id")))
        save_trace(Trace(counts, windows[-1].meta, tokens, windows[-1].placement), path)
        return path

    def _reset_window(self) -> None:
        self._counts = np.zeros((self.num_layers, self.num_experts), np.int64)
        self._steps = 0
        self._sampled = 0
        self._samples: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def _sample(self, layer: int, ids: np.ndarray, src_rank) -> None:
        take = min(len(ids), self.sample_tokens - self._sampled)
        rank = np.full(len(ids), -1, np.int32) if src_rank is None else np.broadcast_to(_numpy(src_rank), (len(ids),))
        self._samples.append((np.full(take, layer, np.int32), ids[:take].astype(np.int32), rank[:take].astype(np.int32)))
        self._sampled += take

    def _close_window(self) -> None:
        tokens = None
        if self._samples:
            layer, topk, rank = (np.concatenate(parts) for parts in zip(*self._samples))
            tokens = TokenSample(layer, topk, rank, np.full(len(layer), -1, np.int64))
        meta = {**self.meta, "window_index": self._next_index, "steps_in_window": self._steps}
        window = Trace(self._counts.astype(np.float64)[None], meta, tokens, self.placement)
        self._windows.append(window)
        if self.out_dir is not None:
            try:
                save_trace(window, os.path.join(self._need_dir(), f"window_{self._next_index:06d}.npz"))
            except OSError as exc:  # a full or read-only disk must not stop serving: the window stays in memory
                self.write_errors += 1
                logger.warning("routing window %d not written to %s (%s); kept in memory for dump()",
                               self._next_index, self.out_dir, exc.strerror or exc)
        self._next_index += 1
        self._reset_window()

    def _need_dir(self) -> str:
        if self.out_dir is None:
            raise RuntimeError("RoutingRecorder has no out_dir: pass one, or give dump() a path")
        os.makedirs(self.out_dir, exist_ok=True)
        return self.out_dir
