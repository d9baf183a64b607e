"""End to end, offline: one rank against two expert-parallel ranks per dispatch backend, in one run.

    python benchmarks/dispatch_e2e.py [--backends shm a2a] [--prompts 64] [--new-tokens 32] [--repeats 3]

tiny-mixtral (benchmarks/bench_checkpoints.py, made on first use), 64 prompts of 5-40 random tokens, 32 new
tokens each, greedy, ignore_eos, all submitted at once. `LLM(ep=1)` stays up; for each backend B,
`LLM(ep=2, dispatch=B)` runs next to it (its rank 1 idles while ep=1 runs), both run each prompt set,
in an order swapped every round; the ratio reported is the median of the per-round ratios (the
shared machine's speed swings within minutes). Greedy tokens must be identical
to ep=1 on every prompt set. Not run by CI; numbers go to docs/dispatch.md.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_checkpoints import make_tiny_mixtral  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="checkpoint dir (default: tiny-mixtral, made on first use)")
    ap.add_argument("--backends", nargs="+", default=["shm", "a2a"])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from moeserve import LLM, SamplingParams

    model = args.model or str(make_tiny_mixtral(Path(tempfile.gettempdir()) / "moeserve-tiny-mixtral"))
    params = SamplingParams(temperature=0.0, max_tokens=args.new_tokens, ignore_eos=True)
    one = LLM(model=model)
    try:
        for backend in args.backends:  # one multi-rank engine per process at a time (one default group)
            two = LLM(model=model, ep=2, dispatch=backend)
            try:
                rates = _rounds({"ep1": one, f"ep2-{backend}": two}, params, args)
            finally:
                two.shutdown()
            ratios = [b / a for a, b in zip(*rates.values())]
            print(f"ep2 {backend} vs ep1: tok/s per round {[round(x) for x in rates[f'ep2-{backend}']]} vs "
                  f"{[round(x) for x in rates['ep1']]}; median ratio {statistics.median(ratios):.2f}; "
                  f"tokens identical on {args.repeats + 1} prompt sets", flush=True)
    finally:
        one.shutdown()


def _rounds(engines: dict, params, args) -> dict[str, list[float]]:
    names = list(engines)
    rates: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.repeats + 1):  # the first pass warms both engines up and is not counted
        rng = random.Random(r)
        prompts = [[rng.randrange(3, 4096) for _ in range(rng.randint(5, 40))] for _ in range(args.prompts)]
        tokens = {}
        for name in names[r % 2:] + names[: r % 2]:
            t = time.perf_counter()
            out = engines[name].generate(prompts, params)
            elapsed = time.perf_counter() - t
            tokens[name] = [o.token_ids for o in out]
            if r:
                rates[name].append(sum(len(x) for x in tokens[name]) / elapsed)
        assert tokens[names[1]] == tokens[names[0]], f"{names[1]}: tokens differ from ep=1 on prompt set {r}"
    return rates


if __name__ == "__main__":
    main()
