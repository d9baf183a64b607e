"""Prompt tokens computed for n samples of one prompt (core/siblings.py), counted, not timed.

    python benchmarks/n_shared_prefill.py [--n 8] [--prompt-len 512] [--budgets 2048 8192] [--json]

The built-in model, one `LLM.generate` call of n greedy samples of a random prompt of the given length,
once per step token budget (--max-num-batched-tokens), with prefix caching on and off. Reported per
case: prompt tokens whose KV the engine computed (`prompt_tokens_computed`, from the scheduler's plans),
each sample's cached prompt tokens, and whether every sample's tokens equal the no-cache run's. Run it
with PYTHONPATH at another checkout to count that checkout's scheduling (the script uses only the
public API).
"""
from __future__ import annotations

import argparse
import json
import random

from moeserve import LLM, SamplingParams


def run(n: int, prompt_len: int, budget: int, prefix_caching: bool) -> dict:
    ids = [random.Random(0).randrange(3, 2000) for _ in range(prompt_len)]
    blocks = n * (-(-(prompt_len + 8) // 16)) + 64
    llm = LLM(max_model_len=prompt_len + 64, kv_cache_blocks=blocks, max_num_batched_tokens=budget,
              max_num_seqs=max(8, n), enable_prefix_caching=prefix_caching)
    try:
        out = llm.generate({"prompt_token_ids": ids}, SamplingParams(n=n, temperature=0.0, max_tokens=4, ignore_eos=True),
                           use_tqdm=False)[0]
        stats = llm.engine.stats()
    finally:
        llm.shutdown()
    return {"prompt_tokens_computed": stats["prompt_tokens_computed"], "steps": stats["num_steps"],
            "cached_per_sample": [s.num_cached_prompt_tokens for s in out.sequences],
            "token_ids": [c.token_ids for c in out.outputs]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--budgets", type=int, nargs="+", default=[2048, 8192])
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    result: dict = {"n": args.n, "prompt_len": args.prompt_len, "cases": {}}
    for budget in args.budgets:
        off = run(args.n, args.prompt_len, budget, prefix_caching=False)
        on = run(args.n, args.prompt_len, budget, prefix_caching=True)
        same = on["token_ids"] == off["token_ids"]
        for name, r in (("prefix caching", on), ("no prefix caching", off)):
            result["cases"][f"{budget}/{name}"] = {k: v for k, v in r.items() if k != "token_ids"} | {"tokens_equal": same}
    if args.json:
        print(json.dumps(result))
        return
    print(f"n={args.n} greedy samples of one {args.prompt_len}-token prompt, built-in model")
    for name, r in result["cases"].items():
        print(f"  budget {name:24s} prompt tokens computed {r['prompt_tokens_computed']:6d}  steps {r['steps']:3d}  "
              f"cached per sample {r['cached_per_sample']}  tokens equal {r['tokens_equal']}")


if __name__ == "__main__":
    main()
