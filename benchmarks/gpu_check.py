"""One command for a machine with one GPU: do moeserve's Triton kernels pass there, and how fast are they?

    python benchmarks/gpu_check.py [--out gpu_check.md | gpu_check.json]

1. runs the GPU-marked tests (`pytest -m gpu tests`: the kernels against torch, whole models against
   transformers on the GPU);
2. times each Triton kernel and its torch counterpart (cuBLAS grouped GEMM, SDPA, eager torch) at
   decode and prefill shapes of a DeepSeek-V3 and a Mixtral-8x7B layer, and sets each time against the
   card's roofline: max(bytes / HBM bandwidth, FLOPs / dense bf16 peak), peaks from PEAKS by the card's
   name (--peak-tbps / --peak-tflops for other cards);
3. serves the built-in model on the GPU with the Triton kernels, then a wide Mixtral (random weights,
   1.6 GB of experts) with the Triton and with the torch kernels, each load-tested by `moeserve bench`;
4. checks and times the `nvshmem` dispatch backend on the GPU (gpu_dispatch_check.py);
5. prints one markdown table (and writes it, or JSON, with --out). About 3-6 minutes on an H100.
--tune also times the fused MoE at each of a few candidate tile shapes and prints the fastest against
the default (fused_moe.tiles_for): the numbers to retune `tiles_for` from.
Without CUDA it exits with one line. --dry-run runs steps 2 and 4 at tiny shapes on the CPU under
TRITON_INTERPRET=1: the harness, not the numbers (tests/kernels/test_triton_gpu_check.py).
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
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]

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

# Layer shapes (config.json of each checkpoint); `local_experts`: one rank's share of DeepSeek-V3's 256
# routed experts at --ep 8, all 8 of Mixtral's. `tiny`: the dry run's stand-in for both.
MODELS = {
    "DeepSeek-V3": dict(hidden=7168, inter=2048, local_experts=32, heads=128, kv_lora=512, rope=64,
                        moe_rows=((16, "decode"), (64, "decode"), (1024, "prefill"))),  # fmt: skip
    "Mixtral-8x7B": dict(hidden=4096, inter=14336, local_experts=8, q_heads=32, kv_heads=8, head_dim=128,
                         moe_rows=((16, "decode"), (64, "decode"), (2048, "prefill"))),  # fmt: skip
}
TINY = dict(hidden=64, inter=48, local_experts=4, heads=4, kv_lora=32, rope=16, q_heads=4, kv_heads=2, head_dim=32,
            moe_rows=((2, "decode"), (4, "decode"), (24, "prefill")), context=48, batch=2, prefill=24,
            norm_rows=(2, 8))  # fmt: skip
FULL = dict(context=4096, batch=64, prefill=2048, norm_rows=(64, 4096))
TARGETS = {"moe-decode": ("bandwidth", 0.70), "moe-prefill": ("compute", 0.60), "attn-decode-4k": ("bandwidth", 0.70)}


@dataclass
class Row:
    kernel: str
    model: str
    phase: str
    shape: str
    triton_us: float | None
    torch_us: float | None
    torch_op: str
    roofline_us: float | None = None
    of_roofline: float | None = None
    bound: str = ""
    target: str = ""


@dataclass
class Case:
    kernel: str
    model: str
    phase: str
    shape: str
    bytes: float
    flops: float
    triton: Callable[[], Any]
    torch: Callable[[], Any] | None
    torch_op: str
    target: str | None = None  # a TARGETS key
    tune: tuple[int, int, Callable[[Any], Any]] | None = None  # fused MoE: rows, slots, the call with given Tiles


def moe_cases(model: str, d: dict, dev, dtype) -> list[Case]:
    import torch
    import torch.nn.functional as F

    from moeserve.kernels.triton.fused_moe import fused_experts

    S, H, I = d["local_experts"], d["hidden"], d["inter"]
    w13 = torch.randn(S, 2 * I, H, device=dev, dtype=dtype) * H**-0.5
    w2 = torch.randn(S, H, I, device=dev, dtype=dtype) * I**-0.5
    cases = []
    for per_slot, phase in d["moe_rows"]:
        R = S * per_slot
        x = torch.randn(R, H, device=dev, dtype=dtype)
        offsets = torch.full((S,), per_slot, device=dev).cumsum(0).to(torch.int32)

        def grouped(x=x, offsets=offsets):
            gate, up = F.grouped_mm(x, w13.transpose(-2, -1), offs=offsets).chunk(2, dim=-1)
            return F.grouped_mm(F.silu(gate) * up, w2.transpose(-2, -1), offs=offsets)

        cases.append(Case(
            "fused_moe", model, f"{phase}, {per_slot} rows/expert",
            f"R={R} S={S} H={H} I={I}", 2 * (3 * S * H * I + 2 * R * H + 2 * R * I), 2 * R * H * 3 * I,
            lambda x=x, offsets=offsets: fused_experts(x, offsets, w13, w2), grouped, "F.grouped_mm (cuBLAS)",
            f"moe-{phase}", (R, S, lambda tiles, x=x, offsets=offsets: fused_experts(x, offsets, w13, w2, tiles=tiles)),
        ))  # fmt: skip
    return cases


def paged_cache(B: int, L: int, BS: int, hk: int, D: int, dev, dtype):
    import torch

    NB = B * L // BS
    k_cache, v_cache = torch.randn(2, NB, BS, hk, D, device=dev, dtype=dtype)
    tables = torch.randperm(NB, device=dev).to(torch.int32).view(B, L // BS)  # scattered blocks
    return k_cache, v_cache, tables, torch.full((B,), L, device=dev)


def attention_cases(model: str, d: dict, dev, dtype) -> list[Case]:
    import torch
    import torch.nn.functional as F

    from moeserve.kernels.triton.paged_attention import paged_decode, paged_prefill

    hq, hk, D, L, BS = d["q_heads"], d["kv_heads"], d["head_dim"], d["context"], 16
    scale, cases = D**-0.5, []
    for B in (1, d["batch"]):
        k_cache, v_cache, tables, lens = paged_cache(B, L, BS, hk, D, dev, dtype)
        q = torch.randn(B, hq, D, device=dev, dtype=dtype)
        keys, values = torch.randn(2, B, hk, L, D, device=dev, dtype=dtype)  # the same context, dense
        cases.append(Case(
            "paged_decode", model, f"decode, context {L}", f"B={B} hq={hq} hk={hk} D={D}",
            2 * (2 * B * L * hk * D + 2 * B * hq * D), 4 * B * hq * L * D,
            lambda q=q, k=k_cache, v=v_cache, t=tables, n=lens: paged_decode(q, k, v, t, n, scale),
            lambda q=q, k=keys, v=values: F.scaled_dot_product_attention(q[:, :, None], k, v, scale=scale,
                                                                         enable_gqa=True),
            "SDPA, dense K/V", "attn-decode-4k" if L == 4096 and B > 1 else None,
        ))  # fmt: skip
    n, prefix = d["prefill"], d["prefill"] * 3  # a chunk of n new tokens after 3n cached
    k_cache, v_cache, tables, lens = paged_cache(1, n + prefix, BS, hk, D, dev, dtype)
    q = torch.randn(n, hq, D, device=dev, dtype=dtype)
    keys, values = torch.randn(2, 1, hk, n + prefix, D, device=dev, dtype=dtype)
    mask = torch.arange(n + prefix, device=dev)[None, :] <= torch.arange(prefix, n + prefix, device=dev)[:, None]
    starts = torch.tensor([0, n], device=dev)
    seen = n * prefix + n * (n + 1) // 2
    cases.append(Case(
        "paged_prefill", model, f"chunked prefill, {n} after {prefix}", f"N={n} hq={hq} hk={hk} D={D}",
        2 * (2 * n * hq * D + 2 * (n + prefix) * hk * D), 4 * hq * D * seen,
        lambda: paged_prefill(q, k_cache, v_cache, tables, starts, lens, scale),
        lambda: F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys, values, attn_mask=mask, scale=scale,
                                               enable_gqa=True),
        "SDPA, dense K/V, mask",
    ))  # fmt: skip
    return cases


def mla_cases(model: str, d: dict, dev, dtype) -> list[Case]:
    import torch

    from moeserve.kernels.triton.mla_decode import mla_decode

    h, R, r, L, BS = d["heads"], d["kv_lora"], d["rope"], d["context"], 16
    scale, cases = (128 + r) ** -0.5, []
    for B in (1, d["batch"]):
        NB = B * L // BS
        cache = torch.randn(NB, BS, R + r, device=dev, dtype=dtype)
        tables = torch.randperm(NB, device=dev).view(B, L // BS)
        lens = torch.full((B,), L, device=dev)
        q_latent, q_rope = torch.randn(B, h, R, device=dev, dtype=dtype), torch.randn(B, h, r, device=dev, dtype=dtype)
        dense = torch.randn(B, L, R + r, device=dev, dtype=dtype)

        def absorbed(ql=q_latent, qr=q_rope, dense=dense):  # dense/mla.py's absorbed path, unpaged
            scores = torch.bmm(torch.cat([ql, qr], dim=-1), dense.transpose(1, 2)) * scale
            return torch.bmm(torch.softmax(scores, dim=-1, dtype=torch.float32).to(dense.dtype), dense[..., :R])

        cases.append(Case(
            "mla_decode", model, f"decode, context {L}", f"B={B} h={h} R={R} r={r}",
            2 * (B * L * (R + r) + 2 * B * h * R), 2 * B * h * L * (2 * R + r),
            lambda ql=q_latent, qr=q_rope, c=cache, t=tables, n=lens: mla_decode(ql, qr, c, t, n, scale),
            absorbed, "torch bmm, dense latents",
        ))  # fmt: skip
    return cases


def norm_cases(model: str, d: dict, dev, dtype) -> list[Case]:
    import torch

    from moeserve.kernels.triton.norm import rms_norm, rms_norm_reference

    H, cases = d["hidden"], []
    for T, phase in zip(d["norm_rows"], ("decode", "prefill")):
        x, res = torch.randn(2, T, H, device=dev, dtype=dtype)
        w = torch.randn(H, device=dev, dtype=dtype)
        cases.append(Case(
            "rms_norm+residual", model, phase, f"T={T} H={H}", 2 * 4 * T * H, 5 * T * H,
            lambda x=x, r=res, w=w: rms_norm(x, w, 1e-6, r), lambda x=x, r=res, w=w: rms_norm_reference(x, w, 1e-6, r),
            "eager torch",
        ))  # fmt: skip
    return cases


def timer(dev) -> Callable[[Callable[[], Any]], float]:
    """fn -> median microseconds per call. CUDA: events, L2 flushed before each call (weights and caches
    come from HBM in serving). CPU (dry run): one timed call after one warm-up."""
    import torch

    if dev.type != "cuda":
        def time_cpu(fn):
            fn()
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e6
        return time_cpu

    flush = torch.empty(256 << 20, dtype=torch.int8, device=dev)

    def time_cuda(fn, reps: int = 20):
        fn()  # compiles
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        return median(times)

    return time_cuda


def measure(cases: list[Case], time_us, peaks: tuple[float, float] | None) -> list[Row]:
    rows = []
    for c in cases:
        row = Row(c.kernel, c.model, c.phase, c.shape, None, None, c.torch_op)
        try:  # a kernel that fails on this card is a row of the table, not the end of the check
            row.triton_us = time_us(c.triton)
        except Exception as e:  # noqa: BLE001
            row.target = f"Triton FAILED: {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
        try:
            row.torch_us = time_us(c.torch) if c.torch else None
        except Exception as e:  # noqa: BLE001 - e.g. grouped_mm missing from this torch, or a dtype it lacks
            row.torch_op += f" (failed: {str(e).splitlines()[0][:60]})"
        print(f"  {c.kernel:18} {c.model:13} {c.phase:34} {fmt(row.triton_us):>10} us", file=sys.stderr, flush=True)
        rows.append(row)
        if row.triton_us is None:
            continue
        if peaks:
            memory_us, compute_us = c.bytes / (peaks[0] * 1e12) * 1e6, c.flops / (peaks[1] * 1e12) * 1e6
            row.roofline_us = max(memory_us, compute_us)
            row.of_roofline = row.roofline_us / row.triton_us
            row.bound = "bandwidth" if memory_us >= compute_us else "compute"
        if c.target and peaks:
            kind, share = TARGETS[c.target]
            bound_us = memory_us if kind == "bandwidth" else compute_us
            got = bound_us / row.triton_us
            row.target = f">= {share:.0%} of {kind}: {got:.0%} {'met' if got >= share else 'MISSED'}"
    return rows


def tune(cases: list[Case], time_us, dry_run: bool) -> list[dict]:
    """Each fused MoE case at every candidate tile shape: the fastest against the shape's default
    (fused_moe.tiles_for). Candidates that do not fit the card (shared memory) are skipped."""
    from moeserve.kernels.triton.fused_moe import Tiles, tiles_for

    candidates = [Tiles(16, 64, 128, 4, 4), Tiles(16, 128, 128, 4, 4), Tiles(16, 64, 256, 4, 3),
                  Tiles(32, 64, 128, 4, 4), Tiles(64, 64, 64, 4, 3), Tiles(64, 128, 64, 8, 3),
                  Tiles(64, 128, 64, 4, 4), Tiles(128, 128, 64, 8, 3), Tiles(128, 256, 64, 8, 3)]  # fmt: skip
    out = []
    for c in cases:
        if c.tune is None or (dry_run and not c.phase.startswith("prefill")):
            continue
        R, S, call = c.tune
        default, times = tiles_for(R, S), {}
        for tiles in [default] + (candidates[:1] if dry_run else candidates):
            try:
                times[tiles] = time_us(lambda: call(tiles))
            except Exception as e:  # noqa: BLE001 - a candidate the card cannot run (out of resources)
                print(f"  {tiles}: {type(e).__name__}", file=sys.stderr)
        best = min(times, key=times.get)
        out.append({"model": c.model, "phase": c.phase, "default": str(default), "default_us": times[default],
                    "best": str(best), "best_us": times[best], "gain": times[default] / times[best]})  # fmt: skip
    return out


def tuning_table(rows: list[dict]) -> str:
    lines = ["| model | phase | default tiles | us | best tiles | us | gain |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['phase']} | {r['default']} | {r['default_us']:.1f} | {r['best']} | "
              f"{r['best_us']:.1f} | {r['gain']:.2f} |" for r in rows]  # fmt: skip
    return "\n".join(lines)


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


def fmt(v, spec: str = ".1f") -> str:
    return "n/a" if v is None else format(v, spec)


def table(rows: list[Row]) -> str:
    head = ("| kernel | model | phase | shape | Triton us | torch us | torch op | speed-up | roofline us | of roofline "
            "| bound | target |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        speedup = r.torch_us / r.triton_us if r.torch_us and r.triton_us else None
        lines.append(f"| {r.kernel} | {r.model} | {r.phase} | {r.shape} | {fmt(r.triton_us)} | {fmt(r.torch_us)} | "
                     f"{r.torch_op} | {fmt(speedup, '.2f')} | {fmt(r.roofline_us)} | {fmt(r.of_roofline, '.0%')} | "
                     f"{r.bound} | {r.target} |")  # fmt: skip
    return "\n".join(lines)


def report(result: dict) -> str:
    lines = [f"## GPU check: {result['device']}, {result['date']}", "", f"Peaks: {result['peaks_source']}", "",
             table([Row(**r) for r in result["kernels"]]), "", f"GPU tests (pytest -m gpu): {result['gpu_tests']}",
             "moeserve serve + moeserve bench (64 requests, 128 in / 64 out, concurrency 16):", "",
             serve_table(result["serve_bench"]) if isinstance(result["serve_bench"], dict) else result["serve_bench"],
             "",
             f"nvshmem dispatch on the GPU (gpu_dispatch_check.py): {json.dumps(result.get('dispatch'))}"]  # fmt: skip
    if result.get("tuning"):
        lines += ["", "Fused MoE tiles (--tune):", "", tuning_table(result["tuning"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="also write the results: .json as JSON, anything else as markdown")
    p.add_argument("--dry-run", "--interpret", action="store_true", dest="dry_run",
                   help="tiny shapes on the CPU under TRITON_INTERPRET=1: the harness, no measurement")  # fmt: skip
    p.add_argument("--peak-tbps", type=float, help="HBM bandwidth in TB/s (overrides the card table)")
    p.add_argument("--peak-tflops", type=float, help="dense bf16 TFLOP/s (overrides the card table)")
    p.add_argument("--skip-tests", action="store_true", help="do not run pytest -m gpu")
    p.add_argument("--skip-serve", action="store_true", help="do not serve and bench the built-in model")
    p.add_argument("--skip-kernels", action="store_true", help="do not time the kernels")
    p.add_argument("--skip-wide", action="store_true", help="serve only the built-in model (no wide Mixtral)")
    p.add_argument("--skip-dispatch", action="store_true", help="do not check the nvshmem dispatch backend")
    p.add_argument("--tune", action="store_true", help="also time the fused MoE at candidate tile shapes")
    args = p.parse_args(argv)
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
    result: dict[str, Any] = {"device": name, "date": time.strftime("%Y-%m-%d"), "peaks_source": source,
                              "command": " ".join(["python", "benchmarks/gpu_check.py", *sys.argv[1:]])}  # fmt: skip
    skip = "skipped (dry run)" if args.dry_run else "skipped"
    result["gpu_tests"] = skip if args.dry_run or args.skip_tests else gpu_tests(300)
    dtype = torch.float32 if args.dry_run else torch.bfloat16  # the interpreter's bf16 arithmetic is not bf16's
    torch.manual_seed(0)
    rows, tuning, time_us = [], [], timer(dev)
    with torch.inference_mode():
        for model, dims in MODELS.items() if not args.skip_kernels else ():
            d = {**dims, **(TINY if args.dry_run else FULL)}
            builders = (moe_cases, mla_cases, norm_cases) if model == "DeepSeek-V3" else (moe_cases, attention_cases)
            for build in builders:
                cases = build(model, d, dev, dtype)
                rows += measure(cases, time_us, peaks)
                tuning += tune(cases, time_us, args.dry_run) if args.tune else []
                del cases
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
    result["kernels"] = [asdict(r) for r in rows]
    result["tuning"] = tuning
    result["serve_bench"] = skip if args.dry_run or args.skip_serve else serve_runs(args.skip_wide)
    if args.dry_run or args.skip_dispatch:
        result["dispatch"] = skip
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        from gpu_dispatch_check import check as dispatch_check

        result["dispatch"] = dispatch_check(worlds=(1, 2), timeout_s=150)
    text = report(result)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) if args.out.endswith(".json") else text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
