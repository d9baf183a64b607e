"""Whole-model runs against transformers, many per process: a Python process with torch, transformers
and triton imported costs seconds to start, more than a tiny model's run, so the kernel-set and FP8
tests run every architecture's job in one child (TRITON_INTERPRET=1 has to be set before anything
imports triton, hence a child at all) or, for the torch set, in the test process itself.

    python model_jobs.py '<json list of jobs>'   # prints one JSON line per job: {"job": i, ...}

A job is {"kind": "greedy" | "fp8", "arch", "scratch", "kernels", ...}; a job that raises prints
{"job": i, "error": traceback} and the next one runs.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import traceback
from pathlib import Path

MODELS = Path(__file__).resolve().parents[1] / "models"
NEW_TOKENS = 4

# (module under moeserve.kernels.triton, function) -> counted calls; installed once per process
_COUNTED = (("fused_moe", "fused_moe"), ("fused_moe", "fused_experts"), ("paged_attention", "paged_decode"),
            ("paged_prefill", "paged_prefill"), ("mla_decode", "mla_decode"), ("mla_decode", "mla_prefill"),
            ("mla_prefill", "mla_prefill_expanded"), ("norm", "rms_norm"), ("fp8_linear", "fp8_linear"))
CALLS: dict[str, int] = {}
_installed = False


def _count_triton_calls() -> None:
    """Wraps each Triton kernel entry point so a set that quietly fell back to torch shows no calls;
    fused_moe also counts its FP8 calls apart ("fused_moe_fp8")."""
    global _installed
    if _installed:
        return
    import importlib

    for module_name, name in _COUNTED:
        module = importlib.import_module(f"moeserve.kernels.triton.{module_name}")
        fn = getattr(module, name)

        def wrapped(*args, _fn=fn, _name=name, **kwargs):
            CALLS[_name] = CALLS.get(_name, 0) + 1
            if _name == "fused_moe" and kwargs.get("fp8") is not None:
                CALLS["fused_moe_fp8"] = CALLS.get("fused_moe_fp8", 0) + 1
            return _fn(*args, **kwargs)

        setattr(module, name, wrapped)
    _installed = True


def greedy_job(arch: str, scratch: str, kernels: str, lens=(2, 7, 13), batch_tokens: int = 12) -> dict:
    """Greedy tokens of a few prompts (chunked prefill mixed with decodes) next to transformers'."""
    import torch

    from moeserve import LLM, SamplingParams
    from tiny_models import hf_greedy, make_any_checkpoint

    torch.manual_seed(0)
    hf, path = make_any_checkpoint(arch, Path(scratch))
    rng = random.Random(0)
    prompts = [[rng.randrange(3, hf.config.vocab_size) for _ in range(n)] for n in lens]
    want = hf_greedy(hf, prompts, NEW_TOKENS)
    llm = LLM(model=str(path), block_size=4, max_num_batched_tokens=batch_tokens, kernels=kernels)
    try:
        kernel_set = type(llm.engine.executor.worker.runner.kernels).__name__
        outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True))
    finally:
        llm.shutdown()
    return {"got": [o.token_ids for o in outs], "want": want, "set": kernel_set}


def fp8_job(arch: str, scratch: str, kernels: str, quantization: str, kv: str) -> dict:
    """Prompt logprobs under FP8 next to transformers' fp32 log-softmax, with what was quantized."""
    import torch

    from moeserve import LLM, SamplingParams
    from tiny_models import make_any_checkpoint

    torch.manual_seed(0)
    hf, path = make_any_checkpoint(arch, Path(scratch))
    rng = random.Random(0)
    prompts = [[rng.randrange(3, hf.config.vocab_size) for _ in range(n)] for n in (9, 14)]
    with torch.no_grad():
        logits = [hf(torch.tensor([p])).logits[0].float() for p in prompts]
    llm = LLM(model=str(path), block_size=4, max_num_batched_tokens=8, kernels=kernels, quantization=quantization,
              kv_cache_dtype=kv)
    try:
        runner = llm.engine.executor.worker.runner
        cache_dtypes = sorted({str(t.dtype) for layer in runner.kv_caches for t in layer})
        fp8_params = sum(p.dtype == torch.float8_e4m3fn for p in runner.model.parameters())
        outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True, prompt_logprobs=0))
    finally:
        llm.shutdown()
    diffs, spread = [], []
    for out, prompt, lg in zip(outs, prompts, logits):
        ref = torch.log_softmax(lg, dim=-1)
        spread.append(float(lg.std()))
        diffs += [abs(out.prompt_logprobs[i][prompt[i]].logprob - float(ref[i - 1, prompt[i]]))
                  for i in range(1, len(prompt))]
    return {"diffs": diffs, "std": min(spread), "cache": cache_dtypes, "fp8_params": int(fp8_params)}


def run_job(job: dict) -> dict:
    """One job in this process; with the Triton set, the calls of each kernel it made ("calls")."""
    job = dict(job)
    kind = job.pop("kind")
    if job["kernels"] == "triton":
        _count_triton_calls()
    CALLS.clear()
    out = (greedy_job if kind == "greedy" else fp8_job)(**job)
    return {**out, "calls": dict(CALLS)}


def run_in_child(jobs: list[dict], env: dict[str, str], mla_path: str | None = None,
                 timeout_s: float = 1500) -> list[dict]:
    """Every job in one child process with `env` added (and every MLA slice forced to `mla_path`, "absorb"
    or "expand", if given); one result per job, in order ({"error": ...} where it raised)."""
    done = subprocess.run([sys.executable, __file__, json.dumps(jobs)] + ([mla_path] if mla_path else []),
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout_s)
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith('{"job"'):
            out = json.loads(line)
            results[out.pop("job")] = out
    missing = {"error": f"the child exited with {done.returncode} before this job: {done.stderr[-3000:]}"}
    return [results.get(i, missing) for i in range(len(jobs))]


def main() -> None:
    sys.path.insert(0, str(MODELS))
    if len(sys.argv) > 2:  # an MLA path forced for every slice of sequences
        from moeserve.dense.mla import MultiHeadLatentAttention

        MultiHeadLatentAttention._use_absorb = lambda self, part: sys.argv[2] == "absorb"
    for i, job in enumerate(json.loads(sys.argv[1])):
        try:
            out = run_job(job)
        except Exception:
            out = {"error": traceback.format_exc()[-3000:]}
        print(json.dumps({"job": i, **out}), flush=True)


if __name__ == "__main__":
    main()
