"""Regenerate the sample traces in this folder (run from the repo root):

    python traces/make_samples.py [--shared DIR] [--only NAME ...]

- synthetic_recorder.npz: 6 windows written by `RoutingRecorder` from seeded synthetic top-2 routing of a
  4-layer, 16-expert model whose hot experts drift between windows, with per-token samples.
- builtin_model.npz: the built-in model's own routing (the placement commands' sample), recorded by the
  engine's recorder while it completes the prompts below greedily: real, skewed routing.
- mixtral_excerpt.npz: the third-party Mixtral per-token file `routing_raw.jsonl` through the importer, all
  counts and 400 of its token records (a small excerpt, kept for examples; the full file is not copied
  here). DIR holds the third-party traces (default: $MOESERVE_SHARED_TRACES; traces/README.md).
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


BUILTIN_PROMPTS = [
    "The capital of France is", "Once upon a time there was", "She opened the letter and read",
    "The weather this morning was", "My dear friend, I write to tell you", "He walked into the room and",
    "The history of the town begins", "In the evening the family sat", "The doctor said that the patient",
    "It is a truth universally acknowledged", "The little boat sailed across", "When the war was over,",
    "The best way to learn a language is", "Every morning before breakfast", "The old house at the end of the road",
    "Her sister had always believed that",
]


def builtin(path: str, window_steps: int = 8, max_tokens: int = 48) -> None:
    """Routing of the built-in model, recorded by the engine (one window per `window_steps` steps)."""
    import tempfile

    from moeserve import LLM, SamplingParams

    with tempfile.TemporaryDirectory() as tmp, LLM(max_model_len=256, kv_cache_blocks=128, record_trace_dir=tmp,
                                                    record_window_steps=window_steps) as llm:
        llm.generate(BUILTIN_PROMPTS, SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True))
        llm.engine.recorder_stop()
        llm.engine.recorder_dump(path)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shared", default=os.environ.get("MOESERVE_SHARED_TRACES", ""),
                   help="folder of the third-party traces (default: $MOESERVE_SHARED_TRACES)")
    p.add_argument("--only", nargs="+", choices=("synthetic", "builtin", "mixtral"), help="regenerate only these")
    args = p.parse_args()
    only = set(args.only or ("synthetic", "builtin", "mixtral"))
    if "synthetic" in only:
        synthetic(os.path.join(HERE, "synthetic_recorder.npz"))
    if "builtin" in only:
        builtin(os.path.join(HERE, "builtin_model.npz"))
    src = os.path.join(args.shared, "mixtral_per_token", "routing_raw.jsonl")
    if "mixtral" not in only:
        pass
    elif os.path.exists(src):
        from moeserve.cli import main as cli

        cli(["trace", "convert", src, "-o", os.path.join(HERE, "mixtral_excerpt.npz"), "--max-tokens", "400"])
    else:
        print("skipped mixtral_excerpt.npz: mixtral_per_token/routing_raw.jsonl not found under --shared "
              "(or $MOESERVE_SHARED_TRACES)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
