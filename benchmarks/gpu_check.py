"""One command for a machine with one GPU: do moeserve's Triton kernels pass there, and how fast are they?

    python benchmarks/gpu_check.py [--out gpu_check.md | gpu_check.json]

1. times each Triton kernel and its honest torch counterpart (benchmarks/gpu_kernel_cases.py) at decode
   and prefill shapes of DeepSeek-V3, Mixtral-8x7B and gpt-oss layers, with the host outside the timed
   region (CUDA-graph replays) and L2 flushed (benchmarks/gpu_timing.py), each time against the card's
   roofline -- max(bytes / HBM bandwidth, FLOPs / dense peak), peaks from PEAKS by the card's name
   (--peak-tbps / --peak-tflops for other cards) -- and against the issue's targets;
2. measures the decode step from the host's side (gpu_runtime.py): TPOT at concurrency 1, 16 and 64,
   host time and host syncs per step, for the built-in model and the wide Mixtral, with CUDA graphs and
   with --enforce-eager (docs/gpu_runtime.md);
3. runs the GPU-marked tests (`pytest -m gpu tests`: the kernels against torch, whole models against
   transformers on the GPU), in the time the limit leaves;
4. serves the built-in model on the GPU with the Triton kernels, then a wide Mixtral (random weights,
   1.6 GB of experts) with the Triton and with the torch kernels, each load-tested by `moeserve bench`;
5. checks and times the `nvshmem` dispatch backend on the GPU (gpu_dispatch_check.py);
6. prints one markdown report and writes the raw figures as JSON (benchmarks/results/ by default, with
   the commit, the card, torch, triton and CUDA) after every step and kernel; no step or case starts
   past --time-limit.
--tune also times the fused MoE, MLA decode and both prefill kernels at their candidate tiles, fastest
against the default. Without CUDA it exits with one line. --dry-run runs step 1 at tiny shapes on the
CPU under TRITON_INTERPRET=1, and step 2 on the CPU with the torch set: the harness, not the numbers
(tests/kernels/test_triton_gpu_check.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

from gpu_kernel_cases import BUILDERS, FULL, MODELS, TINY  # noqa: E402
from gpu_runtime import runtime_runs, runtime_table  # noqa: E402
from gpu_timing import Row, fmt, measure, table, timer, tune, tuning_table  # noqa: E402

# card name substring -> (HBM TB/s, dense bf16 TFLOP/s, source); the first match wins
PEAKS = [
    ("H200", 4.8, 989.0, "NVIDIA H200 datasheet: 4.8 TB/s HBM3e; 1,979 TFLOPS bf16 with sparsity = 989 dense"),
    ("H100 NVL", 3.9, 835.0, "NVIDIA H100 datasheet (NVL): 3.9 TB/s; 1,671 TFLOPS bf16 with sparsity"),
    ("H100 PCIe", 2.0, 756.0, "NVIDIA H100 datasheet (PCIe): 2.0 TB/s HBM2e; 1,513 TFLOPS bf16 with sparsity"),
    ("H100", 3.35, 989.0, "NVIDIA H100 datasheet (SXM): 3.35 TB/s HBM3; 1,979 TFLOPS bf16 with sparsity = 989 dense"),
    ("A100 80GB PCIe", 1.935, 312.0, "NVIDIA A100 datasheet (80GB PCIe): 1,935 GB/s; 312 TFLOPS bf16 dense"),
    ("A100-SXM4-80GB", 2.039, 312.0, "NVIDIA A100 datasheet (80GB SXM): 2,039 GB/s; 312 TFLOPS bf16 dense"),
    ("A100", 1.555, 312.0, "NVIDIA A100 datasheet (40GB): 1,555 GB/s; 312 TFLOPS bf16 dense"),
]

def card_peaks(name: str, tbps: float | None, tflops: float | None) -> tuple[tuple[float, float] | None, str]:
    if tbps and tflops:
        return (tbps, tflops), "given by --peak-tbps / --peak-tflops"
    for key, bw, flops, source in PEAKS:
        if key in name:
            return (tbps or bw, tflops or flops), source
    return None, f"unknown card {name!r}: pass --peak-tbps and --peak-tflops for roofline columns"


def gpu_tests(timeout_s: float) -> dict:
    # a test file whose imports the GPU image lacks (openai, nixl: dev and pd extras) is reported, and
    # the GPU tests of every other file still run
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests", "-p", "no:cacheprovider",
           "--continue-on-collection-errors"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("TRITON_INTERPRET", None)
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"status": f"timed out after {timeout_s:.0f} s"}
    lines = proc.stdout.splitlines()
    last = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    failures = [ln for ln in lines if ln.startswith("FAILED") or ln.startswith("ERROR") and "::" in ln]
    uncollected = [ln.removeprefix("ERROR ") for ln in lines if ln.startswith("ERROR tests/") and "::" not in ln]
    if proc.returncode == 0:
        status = "passed"
    elif uncollected and not failures and " passed" in last:
        status = f"passed; {len(uncollected)} test files not collected (imports missing here)"
    else:
        status = "FAILED"
    return {"status": status, "summary": last, "failures": failures, "not_collected": uncollected}


def moeserve(*args: str) -> list[str]:
    return [sys.executable, "-m", "moeserve.cli", *args]


# A Mixtral-shaped model wide enough that the expert weights (1.6 GB in bf16) dominate a decode step,
# random weights and the built-in tokenizer: the step that compares the kernel sets end to end.
WIDE_MIXTRAL = dict(hidden_size=2048, intermediate_size=2048, num_hidden_layers=4, num_attention_heads=16,
                    num_key_value_heads=4, head_dim=128, num_local_experts=16, num_experts_per_tok=2,
                    vocab_size=4096, max_position_embeddings=4096)  # fmt: skip


# (name, --kernels, environment): the Triton set with its fused MoE, with cuBLAS's grouped GEMM for the
# experts instead (MOESERVE_TRITON_FUSED_MOE=0), and the torch set
# the Triton set as served on a GPU (experts by cuBLAS's grouped GEMM: docs/kernels.md), the same set with
# the fused MoE kernel, and the torch set
SERVE_VARIANTS = (("triton", "triton", {}),
                  ("triton, fused MoE", "triton", {"MOESERVE_TRITON_FUSED_MOE": "1"}),
                  ("torch", "torch", {}))  # fmt: skip


def make_wide_mixtral(path: Path, dims: dict | None = None) -> Path:
    """WIDE_MIXTRAL (or `dims`) with random bf16 weights and the built-in tokenizer, saved at path."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    from moeserve.engine.builtin_model import build_tokenizer

    tokenizer = build_tokenizer()
    eos = tokenizer.eos_token_id
    torch.manual_seed(0)
    config = MixtralConfig(eos_token_id=eos, pad_token_id=eos, bos_token_id=None, **(dims or WIDE_MIXTRAL))
    MixtralForCausalLM(config).to(torch.bfloat16).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def serve_and_bench(timeout_s: float, model: str | None = None, kernels: str = "triton", device: str = "cuda",
                    requests: int = 64, environ: dict | None = None) -> dict:
    """`moeserve serve` (the built-in model, or `model`) on a free port with the given device and kernel
    set, then `moeserve bench` against it: 128 prompt and 64 output tokens a request, concurrency 16."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("TRITON_INTERPRET", None)
    env.update(environ or {})
    flags = ["--device", device, "--kernels", kernels] + (["--model", model] if model else [])
    proc = subprocess.Popen(moeserve("serve", "--port", "0", *flags), cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    try:
        url, served = wait_for_server(proc, lines, time.monotonic() + timeout_s)
        for n in (16, requests):  # the first, untimed round compiles the kernels of the shapes it meets
            bench = subprocess.run(
                moeserve("bench", "--base-url", url, "--model", served, "--num-requests", str(n),
                         "--concurrency", "16", "--input-len", "128", "--output-len", "64", "--json", "-"),
                cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s,
            )  # fmt: skip
        if bench.returncode != 0:
            return {"status": "bench failed", "stderr": bench.stderr[-500:]}
        s = json.loads(bench.stdout)
        return {"status": "ok", "flags": " ".join(flags),
                "completed": s["completed"], "output_tok_s": s["output_throughput"],
                "ttft_p50_ms": s["ttft_ms"].get("p50"), "tpot_p50_ms": (s["tpot_ms"] or {}).get("p50")}  # fmt: skip
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        return {"status": f"serve failed: {e}", "log": "".join(lines[-20:])}
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def serve_runs(skip_wide: bool) -> dict:
    """The built-in model with the Triton kernels; then the wide Mixtral with each kernel set, so the
    Triton kernels are measured against torch's (cuBLAS grouped GEMM, SDPA) end to end."""
    runs = {"built-in, triton": serve_and_bench(300)}
    if not skip_wide:
        with tempfile.TemporaryDirectory() as tmp:
            wide = str(make_wide_mixtral(Path(tmp) / "wide-mixtral"))
            for name, kernels, environ in SERVE_VARIANTS:
                runs[f"wide-mixtral, {name}"] = serve_and_bench(300, wide, kernels, environ=environ)
    return runs


def serve_table(runs: dict) -> str:
    lines = ["| model, kernels | completed | output tok/s | TTFT p50 ms | TPOT p50 ms |", "|---|---|---|---|---|"]
    for name, r in runs.items():
        if r.get("status") != "ok":
            lines.append(f"| {name} | {r.get('status')} | | | |")
            continue
        lines.append(f"| {name} | {r['completed']} | {fmt(r['output_tok_s'])} | {fmt(r['ttft_p50_ms'])} | "
                     f"{fmt(r['tpot_p50_ms'], '.2f')} |")  # fmt: skip
    return "\n".join(lines)


def wait_for_server(proc, lines: list[str], deadline: float) -> tuple[str, str]:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with status {proc.returncode}")
        for line in list(lines):
            m = re.search(r"serving (\S+) on (http://[\d.]+:\d+)", line)
            if m:
                models = json.load(urllib.request.urlopen(m.group(2) + "/v1/models", timeout=10))
                return m.group(2), models["data"][0]["id"]
        time.sleep(0.5)
    raise RuntimeError("no 'serving ... on' line in time")


def report(result: dict) -> str:
    kernels, serve = result.get("kernels", []), result.get("serve_bench", "not run")
    lines = [f"## GPU check: {result['device']}, {result['date']}", "", f"Peaks: {result['peaks_source']}", "",
             table([Row(**r) for r in kernels]) if isinstance(kernels, list) else f"Kernels: {kernels}", "",
             f"GPU tests (pytest -m gpu): {result.get('gpu_tests', 'not run')}",
             "moeserve serve + moeserve bench (64 requests, 128 in / 64 out, concurrency 16):", "",
             serve_table(serve) if isinstance(serve, dict) else serve, "",
             f"nvshmem dispatch on the GPU (gpu_dispatch_check.py): {json.dumps(result.get('dispatch', 'not run'))}"]
    runtime = result.get("runtime", "not run")
    lines += ["", "Decode from the host's side (gpu_runtime.py; in-process, 128 in / 64 out):", "",
              runtime_table(runtime) if isinstance(runtime, dict) else runtime]
    if result.get("tuning"):
        lines += ["", "Tiles (--tune):", "", tuning_table(result["tuning"])]
    return "\n".join(lines)


def versions() -> dict:
    """The commit checked out here and the library versions this run uses."""
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        commit = None
    return {"commit": commit, "torch": torch.__version__, "triton": triton_version, "cuda": torch.version.cuda,
            "python": sys.version.split()[0]}


def default_out(name: str) -> Path:
    """benchmarks/results/gpu_check-<date>-<card>.json: where a run's raw figures are kept (committed)."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return REPO / "benchmarks" / "results" / f"gpu_check-{time.strftime('%Y-%m-%d')}-{slug}.json"


def save(result: dict, out: Path) -> None:
    """The results so far: written after every step, so a run stopped by its time limit keeps them."""
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=1) if out.suffix == ".json" else report(result) + "\n"
    out.write_text(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="where to write the results: .json as JSON, anything else as markdown "
                                 "(default benchmarks/results/gpu_check-<date>-<card>.json; none in a dry run)")
    p.add_argument("--dry-run", "--interpret", action="store_true", dest="dry_run",
                   help="tiny shapes on the CPU under TRITON_INTERPRET=1: the harness, no measurement")  # fmt: skip
    p.add_argument("--peak-tbps", type=float, help="HBM bandwidth in TB/s (overrides the card table)")
    p.add_argument("--peak-tflops", type=float, help="dense bf16 TFLOP/s (overrides the card table)")
    p.add_argument("--skip-tests", action="store_true", help="do not run pytest -m gpu")
    p.add_argument("--skip-serve", action="store_true", help="do not serve and bench the built-in model")
    p.add_argument("--skip-kernels", action="store_true", help="do not time the kernels")
    p.add_argument("--skip-wide", action="store_true", help="serve only the built-in model (no wide Mixtral)")
    p.add_argument("--skip-dispatch", action="store_true", help="do not check the nvshmem dispatch backend")
    p.add_argument("--skip-runtime", action="store_true", help="do not measure TPOT, host time and syncs per step")
    p.add_argument("--tune", action="store_true", help="also time the fused MoE and MLA at candidate tile shapes")
    p.add_argument("--only", default="", help="comma-separated kernel names to time (default: all)")
    p.add_argument("--time-limit", type=float, default=540.0,
                   help="seconds after which no further case or step starts (default 540); what ran is saved")
    args = p.parse_args(argv)
    deadline = time.monotonic() + args.time_limit
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); run it on a machine with a GPU, "
              "or pass --dry-run to check the harness on the CPU", file=sys.stderr)  # fmt: skip
        return 2
    sys.path.insert(0, str(REPO))
    dev = torch.device("cpu" if args.dry_run else "cuda")
    name = "CPU (dry run, TRITON_INTERPRET=1)" if args.dry_run else torch.cuda.get_device_name(dev)
    peaks, source = card_peaks(name if not args.dry_run else "H100", args.peak_tbps, args.peak_tflops)
    out = Path(args.out) if args.out else (None if args.dry_run else default_out(name))
    result: dict[str, Any] = {"device": name, "date": time.strftime("%Y-%m-%d"), "peaks_source": source,
                              "command": " ".join(["python", "benchmarks/gpu_check.py", *sys.argv[1:]]),
                              **versions(), "kernels": [], "tuning": []}  # fmt: skip
    skip = "skipped (dry run)" if args.dry_run else "skipped"
    late = "skipped (time limit)"

    def step(key: str, skipped: bool, run) -> None:
        result[key] = skip if skipped else late if time.monotonic() > deadline else run()
        if out is not None:
            save(result, out)

    # the kernels' figures first: they are what a short loan is for; the tests next, in the time left
    step("kernels", args.skip_kernels, lambda: time_kernels(args, dev, peaks, deadline, result, out))
    # the decode step next (the GPU runtime's figures: TPOT, host time, syncs; --skip-kernels runs it first)
    step("runtime", args.skip_runtime, lambda: runtime_runs(args.dry_run, args.skip_wide, deadline))
    step("gpu_tests", args.dry_run or args.skip_tests, lambda: gpu_tests(min(300.0, deadline - time.monotonic())))
    step("serve_bench", args.dry_run or args.skip_serve, lambda: serve_runs(args.skip_wide))
    step("dispatch", args.dry_run or args.skip_dispatch, dispatch_check)
    print(report(result))
    return 0


def time_kernels(args, dev, peaks, deadline: float, result: dict, out: Path | None) -> list[dict]:
    """Every case of every model (or those --only names), their tuning with --tune; saved case by case."""
    import torch

    import triton

    result["triton"] = triton.__version__
    dtype = torch.float32 if args.dry_run else torch.bfloat16  # the interpreter's bf16 arithmetic is not bf16's
    only = {k for k in args.only.split(",") if k}
    torch.manual_seed(0)
    time_us = timer(dev)
    with torch.inference_mode():
        for model, dims in MODELS.items():
            d = {**dims, **(TINY if args.dry_run else FULL)}
            for build in BUILDERS[model]:
                if time.monotonic() > deadline:
                    break
                cases = [c for c in build(model, d, dev, dtype) if not only or c.kernel in only]
                result["kernels"] += [asdict(r) for r in measure(cases, time_us, peaks, deadline)]
                result["tuning"] += tune(cases, time_us, args.dry_run, deadline) if args.tune else []
                if out is not None:
                    save(result, out)
                del cases
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
    return result["kernels"]


def dispatch_check() -> dict:
    from gpu_dispatch_check import check

    return check(worlds=(1, 2), timeout_s=150)


if __name__ == "__main__":
    sys.exit(main())
