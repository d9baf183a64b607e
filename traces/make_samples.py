"""Regenerate the sample traces in this folder (run from the repo root):

    python traces/make_samples.py [--shared ../shared/traces]

- synthetic_recorder.npz: 6 windows written by `RoutingRecorder` from seeded synthetic top-2 routing of a
  4-layer, 16-expert model whose hot experts drift between windows, with per-token samples.
- mixtral_excerpt.npz: the shared Mixtral per-token file `routing_raw.jsonl` through the importer, all counts
  and 400 of its token records (a small excerpt, kept for examples; the full file stays in ../shared).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from moeserve.placement.recorder import RoutingRecorder

HERE = os.path.dirname(os.path.abspath(__file__))


def synthetic(path: str) -> None:
    rng = np.random.default_rng(0)
    layers, experts, tokens, ranks = 4, 16, 64, 4
    rec = RoutingRecorder(layers, experts, steps_per_window=5, sample_tokens=64,
                          meta={"model": "synthetic-16x2", "top_k": 2, "phase": "mixed", "tokens_per_window": 5 * tokens})
    rec.start()
    for step in range(30):
        hot = (step // 10) * 3  # the hot experts shift every 10 steps
        for layer in range(layers):
            p = np.full(experts, 1.0)
            p[(hot + layer + np.arange(3)) % experts] = [6.0, 3.0, 2.0]
            p /= p.sum()
            topk = np.stack([rng.choice(experts, 2, replace=False, p=p) for _ in range(tokens)])
            rec.record(layer, topk, src_rank=np.arange(tokens) % ranks)
        rec.step()
    rec.stop()
    rec.dump(path)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shared", default=os.path.join(HERE, "..", "..", "shared", "traces"))
    args = p.parse_args()
    synthetic(os.path.join(HERE, "synthetic_recorder.npz"))
    src = os.path.join(args.shared, "mixtral_per_token", "routing_raw.jsonl")
    if os.path.exists(src):
        from moeserve.cli import main as cli

        cli(["trace", "convert", src, "-o", os.path.join(HERE, "mixtral_excerpt.npz"), "--max-tokens", "400"])
    else:
        print(f"skipped mixtral_excerpt.npz: {src} not found", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
