"""Benchmark: grouped_mm vs the per-slot loop for the routed experts on this machine.

    python benchmarks/grouped_experts.py [--threads 1]

Prints one line per (shape, tokens, dtype) with both timings and their ratio; docs/models.md
records the numbers behind the default (`GroupedExperts` uses grouped_mm where shapes allow).
"""

from __future__ import annotations

import argparse
import time

import torch

from moeserve.dispatch.local import LocalDispatcher
from moeserve.kernels.reference.experts import experts_grouped, experts_reference, grouped_mm_supported

# (name, hidden, intermediate, experts, top_k)
SHAPES = [("builtin-tiny", 256, 512, 16, 2), ("olmoe-like/4", 512, 256, 64, 8), ("mixtral-like/8", 512, 1792, 8, 2)]


def _time(fn, repeats: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e3


def bench(hidden: int, inter: int, experts: int, top_k: int, tokens: int, dtype: torch.dtype) -> tuple[float, float]:
    """(grouped ms, loop ms) for one expert forward over `tokens` tokens routed uniformly at random."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, hidden, generator=g).to(dtype)
    ids = torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(tokens)])
    batch, _ = LocalDispatcher(experts).dispatch(x, ids, torch.ones(tokens, top_k))
    w13 = (torch.randn(experts, 2 * inter, hidden, generator=g) * 0.02).to(dtype)
    w2 = (torch.randn(experts, hidden, inter, generator=g) * 0.02).to(dtype)
    act = torch.nn.functional.silu
    repeats = max(3, 2000 // tokens)
    with torch.inference_mode():
        grouped = _time(lambda: experts_grouped(batch.hidden, batch.offsets, w13, w2, act), repeats)
        loop = _time(lambda: experts_reference(batch.hidden, batch.counts, w13, w2, act), repeats)
    return grouped, loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, nargs="+", default=[4, 64, 512])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s)")
    print(f"{'shape':16} {'tokens':>6} {'dtype':9} {'grouped ms':>10} {'loop ms':>8} {'loop/grouped':>12}")
    for name, H, I, E, k in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            assert grouped_mm_supported(H, I, dtype)
            for T in args.tokens:
                g, lp = bench(H, I, E, k, T, dtype)
                print(f"{name:16} {T:6d} {str(dtype)[6:]:9} {g:10.3f} {lp:8.3f} {lp / g:12.2f}")


if __name__ == "__main__":
    main()
