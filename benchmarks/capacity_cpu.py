"""moeserve configure's CPU prediction against moeserve's measured offline throughput, in one run.

    python benchmarks/capacity_cpu.py [--calibrate] [--hardware cpu] [--batches 1 8 64]

With --calibrate the CPU profile is measured first (moeserve configure --calibrate, about a minute)
and used at once, so both sides see the same machine state; else the shipped `cpu` profile is used.
Workload: `batch` prompts of 32 random token ids submitted at once to `LLM` (the built-in model,
--num-threads 1 --expert-threads 1, as the calibration runs), 32 new tokens each, greedy,
ignore_eos; best of 2 runs. The decode step is measured as the difference of 32- and 8-token runs
over 24 steps. Both clocks are reported: CPU seconds of the process (one thread, MOESERVE_IDLE_HELPERS=0:
an idle core's time, what the calibration measures) and wall-clock seconds (inflated when other jobs
share the cores).
"""
from __future__ import annotations

import argparse
import os
import random
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--hardware", default="cpu")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--profile-out", help="with --calibrate: keep the profile here")
    args = ap.parse_args()
    hardware = args.hardware
    if args.calibrate:
        from moeserve.capacity.calibrate import write_profile

        hardware = args.profile_out or tempfile.mktemp(suffix=".yaml")
        print(write_profile(hardware))

    os.environ["MOESERVE_IDLE_HELPERS"] = "0"
    from moeserve import LLM, SamplingParams
    from moeserve.capacity.hardware import load_hardware
    from moeserve.capacity.layout import Layout, Precision
    from moeserve.capacity.model_spec import load_model
    from moeserve.capacity.predict import Options, Predictor, Workload

    llm = LLM(num_threads=1, expert_threads=1)
    vocab = llm.engine.vocab_size
    pred = Predictor(load_model(None), load_hardware(hardware), Precision("fp32", "fp32", "fp32"))

    def timed(b: int, new: int, seed: int) -> tuple[float, float]:
        rng = random.Random(seed)
        prompts = [[rng.randrange(3, vocab) for _ in range(32)] for _ in range(b)]
        params = SamplingParams(temperature=0.0, max_tokens=new, ignore_eos=True, detokenize=False)
        cpu, wall = time.process_time(), time.perf_counter()
        llm.generate(prompts, params)
        return time.process_time() - cpu, time.perf_counter() - wall

    timed(2, 4, -1)  # warm-up
    print("| batch | predicted tok/s | measured tok/s, CPU / wall clock | predicted / measured | predicted decode "
          "step ms | measured step ms, CPU / wall | predicted / measured |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for b in args.batches:
        full = [min(t) for t in zip(*(timed(b, 32, 100 * b + r) for r in range(2)))]
        short = [min(t) for t in zip(*(timed(b, 8, 200 * b + r) for r in range(2)))]
        step = [(f - s) / 24 for f, s in zip(full, short)]
        seconds, p_step = pred.offline(Layout(), b, Workload(32, 32), Options())
        predicted = b * 32 / seconds
        cpu_tps, wall_tps = b * 32 / full[0], b * 32 / full[1]
        print(f"| {b} | {predicted:.1f} | {cpu_tps:.1f} / {wall_tps:.1f} | {predicted / cpu_tps:.2f} / {predicted / wall_tps:.2f} "
              f"| {p_step * 1e3:.1f} | {step[0] * 1e3:.1f} / {step[1] * 1e3:.1f} | {p_step / step[0]:.2f} / {p_step / step[1]:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
