"""A GPU's decode step from the host's side: TPOT, host time and host syncs per step, graphs on and off.

    python benchmarks/gpu_runtime.py [--out runtime.json] [--skip-wide] [--dry-run]
    (gpu_check.py runs it as one of its steps and puts its figures into its own JSON)

For the built-in model and the wide Mixtral (gpu_check.WIDE_MIXTRAL: 1.6 GB of bf16 experts), each with
CUDA graphs (the default), with `--enforce-eager`, and (built-in only) with graphs but without async
scheduling, the engine core runs in this process (no HTTP): c requests of 128 random prompt tokens and
64 output tokens (greedy, ignore_eos) at once, for c = 1, 16, 64. Per decode step with all c requests
running (every such step gives each request one token):
- TPOT: the median wall time of `engine.step()`;
- host time: the step's wall time minus the time the host waited for the device (the sampled ids'
  event, `SampledBatch.result`), median: what the host itself spends per step;
- host syncs: the synchronising CUDA calls torch's sync debug mode reports during the step
  (`torch.cuda.set_sync_debug_mode("warn")`: `.item()`, `.tolist()`, blocking copies, stream syncs),
  plus the event wait of the sampled ids (not reported by that mode: one per step read back); the
  reported calls' sources are listed, most frequent first.
One JSON (with gpu_check: inside its own). `--dry-run` runs the harness on the CPU: the torch kernel
set, eager replays for "graphs" (MOESERVE_DECODE_GRAPHS_EAGER=1), tiny sizes: the code, no numbers.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import random
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONCURRENCY = (1, 16, 64)
PROMPT_LEN, OUTPUT_LEN = 128, 64
# (name, engine settings, built-in model only)
MODES = (("graphs", {}, False), ("enforce-eager", {"enforce_eager": True}, False),
         ("graphs, no async scheduling", {"async_scheduling": False}, True))  # fmt: skip
DRY = dict(concurrency=(1, 3), prompt_len=6, output_len=4)
DRY_WIDE = dict(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                head_dim=16, num_local_experts=4, num_experts_per_tok=2, vocab_size=4096, max_position_embeddings=256)


class StepProbe:
    """Times each engine step, the host's wait for the sampled ids inside it, and the synchronising
    calls the sync debug mode reports inside it (CUDA only)."""

    def __init__(self, engine: Any, cuda: bool):
        from moeserve.engine import sampler

        self.engine, self.cuda = engine, cuda
        self.plans: list[Any] = []
        self.wait_s = 0.0
        schedule = engine.scheduler.schedule

        def scheduled():
            plan = schedule()
            self.plans.append(plan)
            return plan

        engine.scheduler.schedule = scheduled
        self._result = sampler.SampledBatch.result
        probe = self

        def timed_result(batch):
            start = time.perf_counter()
            try:
                return probe._result(batch)
            finally:
                probe.wait_s += time.perf_counter() - start

        sampler.SampledBatch.result = timed_result

    def close(self) -> None:
        from moeserve.engine import sampler

        sampler.SampledBatch.result = self._result

    def step(self) -> dict:
        """One engine step -> {seconds, wait_s, syncs, sites, decode (every plan it touched decodes),
        running}."""
        import torch

        self.plans, self.wait_s = [], 0.0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if self.cuda:
                torch.cuda.set_sync_debug_mode("warn")
            start = time.perf_counter()
            try:
                self.engine.step()
            finally:
                seconds = time.perf_counter() - start
                if self.cuda:
                    torch.cuda.set_sync_debug_mode("default")
        syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
        return {"seconds": seconds, "wait_s": self.wait_s, "syncs": len(syncs),
                "sites": [f"{Path(w.filename).name}:{w.lineno}" for w in syncs],
                "decode": bool(self.plans) and all(p.is_decode for p in self.plans),
                "running": self.engine.scheduler.num_running}  # fmt: skip


def run_batch(engine: Any, probe: StepProbe, concurrency: int, prompt_len: int, output_len: int, vocab: int,
              seed: int) -> dict:
    """c requests at once, until all finish -> the figures of the steps that decode all c of them."""
    from moeserve import SamplingParams

    rng = random.Random(seed)
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True, detokenize=False)
    for i in range(concurrency):
        engine.add_request(f"c{concurrency}-{seed}-{i}", [rng.randrange(3, vocab) for _ in range(prompt_len)], params)
    steps = []
    deadline = time.monotonic() + 300
    while engine.has_unfinished_requests():
        if time.monotonic() > deadline:
            raise TimeoutError(f"concurrency {concurrency}: requests unfinished after 300 s")
        steps.append(probe.step())
    full = [s for s in steps if s["decode"] and s["running"] == concurrency]
    if not full:  # a batch that never ran whole (tiny outputs): every decode step
        full = [s for s in steps if s["decode"]] or steps
    sites = collections.Counter(site for s in full for site in s["sites"])
    return {
        "steps": len(steps), "decode_steps": len(full),
        "tpot_ms": 1e3 * statistics.median(s["seconds"] for s in full),
        "tpot_ms_p90": 1e3 * sorted(s["seconds"] for s in full)[int(0.9 * (len(full) - 1))],
        "host_ms_per_step": 1e3 * statistics.median(s["seconds"] - s["wait_s"] for s in full),
        "wait_ms_per_step": 1e3 * statistics.median(s["wait_s"] for s in full),
        "debug_mode_syncs_per_step": statistics.mean(s["syncs"] for s in full),
        "sampled_id_waits_per_step": 1,
        "sync_sites": dict(sites.most_common(8)),
    }  # fmt: skip


def measure_model(model: str | None, modes: list[tuple[str, dict]], dry_run: bool, deadline: float = float("inf")
                  ) -> dict:
    """Every mode of one model (None: the built-in model) -> {mode: {concurrency: figures}}; a mode that
    would start past `deadline` (time.monotonic()) is "skipped (time limit)"."""
    import torch

    from moeserve import LLM

    sizes = DRY if dry_run else dict(concurrency=CONCURRENCY, prompt_len=PROMPT_LEN, output_len=OUTPUT_LEN)
    out: dict[str, Any] = {}
    for name, settings in modes:
        if time.monotonic() > deadline:
            out[name] = "skipped (time limit)"
            continue
        base = (dict(device="cpu", kernels="torch", max_num_seqs=4, block_size=4) if dry_run else
                dict(device="cuda", kernels="triton", max_num_seqs=max(sizes["concurrency"])))  # fmt: skip
        environ = {"MOESERVE_DECODE_GRAPHS_EAGER": "1" if dry_run and not settings.get("enforce_eager") else "0"}
        saved = {k: os.environ.get(k) for k in environ}
        os.environ.update(environ)
        llm = probe = None
        try:
            started = time.perf_counter()
            llm = LLM(model=model, **base, **settings)
            engine = llm.engine
            runner = engine.executor.worker.runner
            graphs = runner.graphs
            figures: dict[str, Any] = {
                "startup_s": time.perf_counter() - started,
                "graphs": None if graphs is None else {"sizes": graphs.sizes, "capture_s": graphs.capture_s,
                                                       "capture_mib": graphs.capture_bytes / 2**20},
                "async_scheduling": engine.async_scheduling,
            }  # fmt: skip
            probe = StepProbe(engine, cuda=not dry_run)
            vocab = engine.vocab_size
            run_batch(engine, probe, 1, sizes["prompt_len"], 2, vocab, seed=999)  # warm-up: first-call costs
            for c in sizes["concurrency"]:
                figures[str(c)] = run_batch(engine, probe, c, sizes["prompt_len"], sizes["output_len"], vocab, seed=c)
            out[name] = figures
        except Exception as e:  # noqa: BLE001 - one failing mode is reported, the others still run
            out[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
        finally:
            if probe is not None:
                probe.close()
            if llm is not None:
                llm.shutdown()
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
            del llm
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    return out


def runtime_runs(dry_run: bool = False, skip_wide: bool = False, deadline: float = float("inf")) -> dict:
    """The built-in model in every mode, then the wide Mixtral with graphs and with --enforce-eager."""
    os.environ.pop("TRITON_INTERPRET", None)  # a dry run's engines run the torch set
    runs = {"built-in": measure_model(None, [(n, s) for n, s, _ in MODES], dry_run, deadline)}
    if not skip_wide and time.monotonic() < deadline:
        sys.path.insert(0, str(Path(__file__).parent))
        from gpu_check import WIDE_MIXTRAL, make_wide_mixtral

        with tempfile.TemporaryDirectory() as tmp:
            wide = str(make_wide_mixtral(Path(tmp) / "wide-mixtral", DRY_WIDE if dry_run else WIDE_MIXTRAL))
            runs["wide-mixtral"] = measure_model(wide, [(n, s) for n, s, builtin in MODES if not builtin], dry_run,
                                                 deadline)
    return runs


def runtime_table(runs: dict) -> str:
    head = ("| model | mode | concurrency | TPOT p50 ms | TPOT p90 ms | host ms/step | wait ms/step "
            "| debug-mode syncs/step | most frequent sync sites |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for model, modes in runs.items():
        for mode, figures in modes.items():
            if isinstance(figures, str):  # skipped
                lines.append(f"| {model} | {mode} | {figures} | | | | | | |")
                continue
            if "error" in figures:
                lines.append(f"| {model} | {mode} | error: {figures['error'][:80]} | | | | | | |")
                continue
            for c, f in figures.items():
                if not c.isdigit():
                    continue
                sites = ", ".join(f"{k} x{v}" for k, v in list(f["sync_sites"].items())[:3])
                lines.append(f"| {model} | {mode} | {c} | {f['tpot_ms']:.2f} | {f['tpot_ms_p90']:.2f} | "
                             f"{f['host_ms_per_step']:.2f} | {f['wait_ms_per_step']:.2f} | "
                             f"{f['debug_mode_syncs_per_step']:.1f} (+1 read back) | {sites} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the figures as JSON")
    p.add_argument("--skip-wide", action="store_true", help="the built-in model only")
    p.add_argument("--dry-run", action="store_true", help="the harness on the CPU, tiny sizes (no figures)")
    args = p.parse_args(argv)
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_runtime: no CUDA device here; pass --dry-run to check the harness on the CPU", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    runs = runtime_runs(args.dry_run, args.skip_wide)
    print(runtime_table(runs))
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
