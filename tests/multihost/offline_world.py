"""The offline API on a world spanning hosts, one launch per host under torchrun: rank 0 runs
`LLM(**settings).generate` on the prompts (greedy) `rounds` times and writes, to --out, the token ids,
the seconds of each round and the dispatcher it ran; the other ranks run the rank loop with the same
settings. Used by test_two_hosts.py (each dispatch backend gives one host's tokens) and by
benchmarks/multihost_dispatch.py (tokens/s side by side).

    torchrun --nnodes 2 --node-rank N ... tests/multihost/offline_world.py --settings '{"ep": 4, ...}' \\
        --prompts prompts.json --max-tokens 16 --rounds 1 --out result.json
"""
from __future__ import annotations

import argparse
import json
import os
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--settings", required=True, help="LLM keywords as JSON")
    ap.add_argument("--prompts", required=True, help="JSON file: a list of prompts (strings or token id lists)")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    settings = json.loads(args.settings)
    import torch

    torch.set_num_threads(1)
    if int(os.environ["RANK"]) != 0:
        from moeserve.engine.rank_worker import run_rank
        from moeserve.engine.startup_checks import check_startup
        from moeserve.settings import engine_config

        return run_rank(check_startup(engine_config(settings)))
    from moeserve import LLM, SamplingParams

    with open(args.prompts) as f:
        prompts = json.load(f)
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    llm = LLM(**settings)
    try:
        dispatcher = type(llm.engine.executor.worker.runner.model.dispatcher).__name__
        tokens, seconds = None, []
        for _ in range(args.rounds):
            started = time.perf_counter()
            outs = llm.generate(prompts, params)
            seconds.append(time.perf_counter() - started)
            got = [o.token_ids for o in outs]
            assert tokens is None or got == tokens, "greedy tokens changed between rounds"
            tokens = got
    finally:
        llm.shutdown()
    with open(args.out, "w") as f:
        json.dump({"tokens": tokens, "seconds": seconds, "dispatcher": dispatcher,
                   "new_tokens": sum(len(t) for t in tokens)}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
