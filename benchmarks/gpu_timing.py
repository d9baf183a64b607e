"""Timing for benchmarks/gpu_check.py: each kernel and its torch counterpart with the host outside the
timed region and L2 flushed, set against the card's roofline.

A call is captured once in a CUDA graph and each timed repetition replays it (`graph`); where capture
fails it is launched eagerly (`eager`), the repetitions queued back to back with one sync at the end,
so the host runs ahead of the device either way. Before every repetition a 256 MiB buffer is zeroed,
which evicts L2 (50 MiB on an H100 / H200): weights and caches come from HBM, as in serving, and the
flush's own ~60 us gives the host a head start. Times are medians of CUDA-event pairs around each
repetition. On the CPU (--dry-run) one timed call after one warm-up: the harness, not a measurement.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Callable

from gpu_kernel_cases import TARGETS, Case


@dataclass
class Row:
    kernel: str
    model: str
    phase: str
    shape: str
    triton_us: float | None
    torch_us: float | None
    torch_op: str
    roofline_us: float | None = None
    of_roofline: float | None = None
    bound: str = ""
    target: str = ""
    timing: str = ""  # how the Triton call was timed: graph (CUDA graph replays) or eager (queued launches)
    others: dict = field(default_factory=dict)  # more counterparts: label -> us (None: it does not run here)


@dataclass
class Timed:
    us: float
    how: str  # "graph", "eager" or "cpu"


def capture(fn: Callable[[], Any]):
    """fn captured in a CUDA graph (after a warm-up on a side stream), or None where it cannot be (an
    op that synchronises, a kernel that is not capturable)."""
    import torch

    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        return graph
    except Exception:  # noqa: BLE001 - fall back to eager launches
        torch.cuda.synchronize()
        return None


def timer(dev, reps: int = 20) -> Callable[[Callable[[], Any]], Timed]:
    """fn -> Timed (median microseconds per call). See the module docstring."""
    import torch

    if dev.type != "cuda":
        def time_cpu(fn):
            fn()
            start = time.perf_counter()
            fn()
            return Timed((time.perf_counter() - start) * 1e6, "cpu")
        return time_cpu

    flush = torch.empty(256 << 20, dtype=torch.int8, device=dev)

    def time_cuda(fn):
        return time_replays(fn, capture, lambda: torch.cuda.Event(enable_timing=True), torch.cuda.synchronize,
                            flush.zero_, reps)  # fmt: skip

    return time_cuda


def time_replays(fn, capture_fn, event, synchronize, flush, reps: int) -> Timed:
    """The CUDA timer's steps with its primitives passed in (tests/kernels/test_triton_gpu_check.py runs
    them on the CPU with stand-ins): a warm-up call that compiles, a capture (None: eager launches), then
    `reps` repetitions queued back to back, each flush(), start event, the call, end event, one sync."""
    fn()  # compiles
    synchronize()
    graph = capture_fn(fn)
    run = graph.replay if graph is not None else fn
    events = [(event(), event()) for _ in range(reps)]
    for start, end in events:
        flush()
        start.record()
        run()
        end.record()
    synchronize()
    how = "graph" if graph is not None else "eager"
    del graph, run  # the graph's memory pool goes back before the next case
    return Timed(median(start.elapsed_time(end) * 1e3 for start, end in events), how)


def fmt(v, spec: str = ".1f") -> str:
    return "n/a" if v is None else format(v, spec)


def measure(cases: list[Case], time_us, peaks: tuple[float, float] | None, deadline: float = float("inf")) -> list[Row]:
    rows = []
    for c in cases:
        if time.monotonic() > deadline:
            break
        row = Row(c.kernel, c.model, c.phase, c.shape, None, None, c.torch_op)
        try:  # a kernel that fails on this card is a row of the table, not the end of the check
            timed = time_us(c.triton)
            row.triton_us, row.timing = timed.us, timed.how
        except Exception as e:  # noqa: BLE001
            row.target = f"Triton FAILED: {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
        try:
            row.torch_us = time_us(c.torch).us if c.torch else None
        except Exception as e:  # noqa: BLE001 - e.g. grouped_mm missing from this torch, or a dtype it lacks
            row.torch_op += f" (failed: {str(e).splitlines()[0][:60]})"
        for label, fn in c.others.items():
            try:
                row.others[label] = time_us(fn).us if fn else None
            except Exception:  # noqa: BLE001 - recorded as not running here
                row.others[label] = None
        print(f"  {c.kernel:22} {c.model:13} {c.phase:36} {fmt(row.triton_us):>10} us {fmt(row.torch_us):>10} us",
              file=sys.stderr, flush=True)  # fmt: skip
        rows.append(row)
        if row.triton_us is None or not peaks:
            continue
        memory_us, compute_us = c.bytes / (peaks[0] * 1e12) * 1e6, c.flops / (peaks[1] * c.peak_factor * 1e12) * 1e6
        row.roofline_us = max(memory_us, compute_us)
        row.of_roofline = row.roofline_us / row.triton_us
        row.bound = "bandwidth" if memory_us >= compute_us else "compute"
        if c.target:
            row.target = target_text(c.target, memory_us, compute_us, row)
    return rows


def target_text(target: str, memory_us: float, compute_us: float, row: Row) -> str:
    """The issue's target for this case, met or MISSED: a share of a roofline and / or a speed-up over
    the torch counterpart."""
    kind, share, speedup = TARGETS[target]
    parts = []
    if share:
        got = (memory_us if kind == "bandwidth" else compute_us) / row.triton_us
        parts.append(f">= {share:.0%} of {kind}: {got:.0%} {'met' if got >= share else 'MISSED'}")
    if speedup and row.torch_us:
        got = row.torch_us / row.triton_us
        parts.append(f">= {speedup:.2f}x torch: {got:.2f}x {'met' if got >= speedup else 'MISSED'}")
    return "; ".join(parts)


def tune(cases: list[Case], time_us, dry_run: bool, deadline: float = float("inf")) -> list[dict]:
    """Each case that has tile candidates (fused MoE, MLA) timed at every candidate: the fastest against
    the default its wrapper picks. Candidates the card cannot run (shared memory) are skipped."""
    out = []
    for c in cases:
        if c.tune is None or time.monotonic() > deadline:
            continue
        default, candidates, call = c.tune
        times = {}
        for tiles in [default] + list(candidates[:1] if dry_run else candidates):
            if tiles in times:
                continue
            try:
                times[tiles] = time_us(lambda: call(tiles)).us
            except Exception as e:  # noqa: BLE001 - a candidate the card cannot run (out of resources)
                print(f"  {tiles}: {type(e).__name__}", file=sys.stderr)
        if default not in times:
            continue
        best = min(times, key=times.get)
        out.append({"kernel": c.kernel, "model": c.model, "phase": c.phase, "default": str(default),
                    "default_us": times[default], "best": str(best), "best_us": times[best],
                    "gain": times[default] / times[best],
                    "all": {str(t): us for t, us in times.items()}})  # fmt: skip
    return out


def tuning_table(rows: list[dict]) -> str:
    lines = ["| kernel | model | phase | default tiles | us | best tiles | us | gain |", "|" + "---|" * 8]
    lines += [f"| {r['kernel']} | {r['model']} | {r['phase']} | {r['default']} | {r['default_us']:.1f} | {r['best']} | "
              f"{r['best_us']:.1f} | {r['gain']:.2f} |" for r in rows]  # fmt: skip
    return "\n".join(lines)


def table(rows: list[Row]) -> str:
    head = ("| kernel | model | phase | shape | Triton us | torch us | torch op | speed-up | roofline us | of roofline "
            "| bound | target | timing |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        speedup = r.torch_us / r.triton_us if r.torch_us and r.triton_us else None
        lines.append(f"| {r.kernel} | {r.model} | {r.phase} | {r.shape} | {fmt(r.triton_us)} | {fmt(r.torch_us)} | "
                     f"{r.torch_op} | {fmt(speedup, '.2f')} | {fmt(r.roofline_us)} | {fmt(r.of_roofline, '.0%')} | "
                     f"{r.bound} | {r.target} | {r.timing} |")  # fmt: skip
    others = [f"- {r.kernel}, {r.model}, {r.phase}: {label} {fmt(us)} us"
              + (f" ({us / r.triton_us:.2f}x the Triton time)" if us and r.triton_us else "")
              for r in rows for label, us in r.others.items()]  # fmt: skip
    return "\n".join(lines + (["", "Further counterparts:"] + others if others else []))
