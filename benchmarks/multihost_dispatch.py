"""Offline tokens/s across two hosts: hierarchical dispatch against a2a between all ranks, side by side.

    sudo python benchmarks/multihost_dispatch.py [--ep 8] [--tp 1] [--pairs 2] [--prompts 64] \\
        [--new-tokens 32] [--rounds 3]

Two simulated hosts (tests/multihost/harness.py: network, UTS, IPC, mount and pid namespaces joined by
a veth bridge; root needed), `--ep 8 --nodes 2`: four ranks per host under torchrun, the offline API
on rank 0 (tests/multihost/offline_world.py). Each launch runs the same prompts (random token ids, 5-40
each, greedy, ignore_eos, all submitted at once) for --rounds rounds after one warm-up round; launches
alternate a2a, hier, a2a, hier, ... (--pairs of them), so the shared machine's swings hit both alike.
Reported: each launch's tokens/s (median of its rounds), and the median of the per-pair ratios
hier / a2a. Greedy tokens must be identical across every launch. Not run by CI; numbers go to
docs/multihost.md.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "multihost"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ep", type=int, default=8)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backends", nargs=2, default=["a2a", "hier"], help="the baseline, then the candidate")
    ap.add_argument("--json", action="store_true", help="print every launch's numbers as JSON too")
    args = ap.parse_args()
    from harness import Cluster, unavailable
    from servers import run_offline

    reason = unavailable()
    if reason:
        sys.exit(f"multihost_dispatch: {reason}")
    os.environ.setdefault("MOESERVE_GEMM_WARMUP_ROWS", "0")
    rng = random.Random(0)
    prompts = [[rng.randrange(1, 4000) for _ in range(rng.randint(5, 40))] for _ in range(args.prompts)]
    settings = dict(ep=args.ep, tp=args.tp, kv_cache_blocks=256, max_model_len=512)
    launches: list[dict] = []
    reference = None
    with Cluster(args.nodes) as cluster:
        for pair in range(args.pairs):
            for backend in args.backends:
                result = run_offline(list(cluster), args.ep // args.nodes, dict(settings, dispatch=backend), prompts,
                                     args.new_tokens, rounds=args.rounds + 1, timeout_s=1800)
                if reference is None:
                    reference = result["tokens"]
                assert result["tokens"] == reference, f"{backend} changed the greedy tokens"
                rates = [result["new_tokens"] / s for s in result["seconds"][1:]]  # the first round warms up
                launches.append(dict(pair=pair, backend=backend, dispatcher=result["dispatcher"], tok_s=rates,
                                     median=statistics.median(rates)))
                print(f"pair {pair} {backend:5s} ({result['dispatcher']}): tok/s per round "
                      f"{[round(r, 1) for r in rates]}, median {statistics.median(rates):.1f}", flush=True)
    base, cand = args.backends
    ratios = [next(x["median"] for x in launches if x["pair"] == p and x["backend"] == cand) /
              next(x["median"] for x in launches if x["pair"] == p and x["backend"] == base) for p in range(args.pairs)]
    print(f"--ep {args.ep} --tp {args.tp} --nodes {args.nodes}, {args.prompts} prompts x {args.new_tokens} tokens: "
          f"{cand} / {base} per pair {[round(r, 2) for r in ratios]}, median {statistics.median(ratios):.2f}x; "
          f"greedy tokens identical in all {len(launches)} launches")
    if args.json:
        print(json.dumps(launches))


if __name__ == "__main__":
    main()
