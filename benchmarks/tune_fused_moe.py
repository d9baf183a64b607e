"""Tune the fused MoE's tiles on this card and keep them as data (moeserve/kernels/triton/configs/fused_moe.json).

    python benchmarks/tune_fused_moe.py [--models DeepSeek-V3,Mixtral-8x7B] [--rows 1,4,16,64,256,1024]
                                        [--dtype bfloat16] [--out PATH] [--dry-run]

For each layer shape (benchmarks/gpu_kernel_cases.py MODELS: slots, hidden, intermediate, top-k) and each
batch size, given as rows per expert slot (balanced routing, T = S * rows / k tokens), `fused_moe.fused_moe`
runs at every candidate tile (fused_moe.CANDIDATE_TILES), timed as gpu_check.py times kernels (CUDA-graph
replays, L2 flushed), and the fastest is written under the card's name, the shape's key and the batch
size (tile_configs.store); `fused_moe.pick_tiles` reads it back for every batch up to that size. A
candidate the card cannot run is skipped. --dry-run: tiny shapes on the CPU under TRITON_INTERPRET=1,
two candidates, written only where --out says (the harness, not numbers).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

from gpu_kernel_cases import MODELS, TINY, balanced_slots  # noqa: E402
from gpu_timing import timer  # noqa: E402


def tune_shape(model: str, dims: dict, rows: list[int], dtype, dev, time_us, candidates) -> list[dict]:
    """Every batch size of one layer shape: [{model, shape, rows, best, us, default_us, all}]."""
    import torch

    from moeserve.kernels.triton.fused_moe import fused_moe, shape_key, tiles_for

    S, H, I, k = dims["local_experts"], dims["hidden"], dims["inter"], dims["top_k"]
    w13 = (torch.randn(S, 2 * I, H, device=dev) * H**-0.5).to(dtype)
    w2 = (torch.randn(S, H, I, device=dev) * I**-0.5).to(dtype)
    out = []
    for per_slot in rows:
        T = max(1, S * per_slot // k)
        x = torch.randn(T, H, device=dev).to(dtype)
        slots, weights = balanced_slots(T, k, S, dev), torch.rand(T, k, device=dev)
        times = {}
        for tiles in dict.fromkeys([tiles_for(T * k, S), *candidates]):
            try:
                times[tiles] = time_us(lambda: fused_moe(x, slots, weights, w13, w2, tiles=tiles, may_drop=False)).us
            except Exception as e:  # noqa: BLE001 - a candidate the card cannot run (out of resources)
                print(f"  {model} {per_slot} rows {tiles}: {type(e).__name__}", file=sys.stderr)
        best = min(times, key=times.get)
        default = times.get(tiles_for(T * k, S))
        print(f"  {model:13} {per_slot:5} rows/slot  best {best} {times[best]:9.1f} us  heuristic "
              f"{default if default is None else f'{default:.1f}'} us", file=sys.stderr, flush=True)  # fmt: skip
        out.append({"model": model, "shape": shape_key(w13, w2), "rows": per_slot, "best": best, "us": times[best],
                    "default_us": default, "all": {str(t): us for t, us in times.items()}})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated layer shapes of gpu_kernel_cases.MODELS")
    p.add_argument("--rows", default="1,4,16,64,256,1024", help="batch sizes as rows per expert slot")
    p.add_argument("--dtype", default="bfloat16", help="the weights' and activations' dtype")
    p.add_argument("--out", help="the table to write (default: the package's configs/fused_moe.json)")
    p.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU under TRITON_INTERPRET=1")
    args = p.parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("tune_fused_moe: no CUDA device here; run it on the card to tune, or pass --dry-run", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from moeserve.kernels.triton import tile_configs
    from moeserve.kernels.triton.fused_moe import CANDIDATE_TILES

    dev = torch.device("cpu" if args.dry_run else "cuda")
    dtype = torch.float32 if args.dry_run else getattr(torch, args.dtype)
    candidates = CANDIDATE_TILES[:2] if args.dry_run else CANDIDATE_TILES
    rows = [int(r) for r in args.rows.split(",")] if not args.dry_run else [1, 4]
    card = tile_configs.card_name(dev)
    out = Path(args.out) if args.out else (None if args.dry_run else tile_configs.CONFIG_DIR)
    start = time.monotonic()
    torch.manual_seed(0)
    with torch.inference_mode():
        for model in args.models.split(","):
            dims = {**MODELS[model], **TINY} if args.dry_run else MODELS[model]
            for r in tune_shape(model, dims, rows, dtype, dev, timer(dev), candidates):
                b = r["best"]
                if out is not None:
                    directory, kernel = (out, "fused_moe") if out.suffix != ".json" else (out.parent, out.stem)
                    tile_configs.store(kernel, card, r["shape"], r["rows"],
                                       [b.block_m, b.block_n, b.block_k, b.num_warps, b.num_stages], directory)
    print(f"tuned on {card} in {time.monotonic() - start:.0f} s" + (f"; written to {out}" if out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
