"""The DistServe picture on two cores: long prompts arriving at a steady rate while other requests
stream tokens, served by a 1P1D pair (one core each, behind vllm-router) and by one colocated server
(two cores), same client, same requests, one run.

    python benchmarks/pd_vs_colocated.py [--long-len 2000] [--long-rate 1.0] [--duration-s 40] [--json]

Model: the built-in tiny MoE. Streams: `--streams` clients in a closed loop (32-token prompts, 64
tokens each); longs: Poisson arrivals of `--long-len`-token prompts asking 8 tokens. Reported per
setup and per class: TTFT and TPOT p50/p99, output throughput, goodput (requests meeting both SLOs
per second). The P/D setup also reports its KV read rate (decode /metrics: bytes over the read
histogram's seconds) against a plain in-process memory copy of the same bytes.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from moeserve.server import bench  # noqa: E402
from moeserve.server.bench_stats import summarize  # noqa: E402

SERVE = [sys.executable, "-m", "moeserve.cli", "serve", "--kv-cache-blocks", "1024", "--max-model-len", "4096"]
ENV = dict(os.environ, PYTHONPATH=str(REPO), UCX_NET_DEVICES="lo", PYTHONUNBUFFERED="1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], url: str, path: str = "/health", timeout_s: float = 600) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}")
        try:
            if httpx.get(url + path, timeout=5).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.kill()
    raise RuntimeError(f"{' '.join(cmd)} did not become healthy")


def load_args(base_url: str, model: str, **kw) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    args = p.parse_args(["--base-url", base_url, "--model", model])
    for k, v in kw.items():
        setattr(args, k, v)
    return args


async def mixed_load(base_url: str, model: str, a: argparse.Namespace, seed: int) -> dict:
    """Streams and longs at once; each class summarized on its own."""
    import random

    n_long = max(1, int(a.long_rate * a.duration_s))
    n_stream = max(1, a.streams * int(a.duration_s / 2))
    longs = load_args(base_url, model, input_len=a.long_len, output_len=8, num_requests=n_long, concurrency=0,
                      request_rate=a.long_rate, seed=seed, warmup=0, timeout_s=600.0)
    streams = load_args(base_url, model, input_len=32, output_len=64, num_requests=n_stream, concurrency=a.streams,
                        request_rate=None, seed=seed + 1, warmup=1, timeout_s=600.0)
    long_items = bench._random_items(longs, random.Random(seed))
    stream_items = bench._random_items(streams, random.Random(seed + 1))
    (long_recs, long_s), (stream_recs, stream_s) = await asyncio.gather(
        bench._timed_load(longs, long_items), bench._timed_load(streams, stream_items))
    slo = dict(slo_ttft_ms=a.slo_ttft_ms, slo_tpot_ms=a.slo_tpot_ms)
    return {"long": summarize(long_recs, long_s, **slo), "stream": summarize(stream_recs, stream_s, **slo),
            "output_throughput": (sum(r.output_tokens for r in long_recs + stream_recs if r.ok)
                                  / max(long_s, stream_s))}


def metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def memcpy_gbps(nbytes: int, repeats: int = 50) -> float:
    """The best of `repeats` plain copies of `nbytes` in this process (the best: the machine is shared)."""
    import torch

    torch.set_num_threads(1)  # one thread, as one read is: two spun threads on a loaded machine measured 0.06 GB/s
    src, dst = torch.ones(max(1, nbytes // 4)), torch.empty(max(1, nbytes // 4))
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t)
    return src.numel() * 4 / best / 1e9


def brief(s: dict) -> dict:
    return {"completed": s["completed"], "failed": s["failed"], "ttft_p50_ms": s["ttft_ms"].get("p50"),
            "ttft_p99_ms": s["ttft_ms"].get("p99"), "tpot_p50_ms": s["tpot_ms"].get("p50"),
            "tpot_p99_ms": s["tpot_ms"].get("p99"), "output_throughput": s["output_throughput"],
            "goodput": s["goodput"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--long-len", type=int, default=2000, help="prompt tokens of the long requests")
    p.add_argument("--long-rate", type=float, default=1.0, help="long requests per second (Poisson)")
    p.add_argument("--streams", type=int, default=4, help="streaming clients in a closed loop")
    p.add_argument("--duration-s", type=float, default=40.0, help="about how long each setup is loaded")
    p.add_argument("--slo-ttft-ms", type=float, default=5000.0)
    p.add_argument("--slo-tpot-ms", type=float, default=100.0)
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    a = p.parse_args()
    if shutil.which("vllm-router") is None or shutil.which("taskset") is None:
        print("needs vllm-router (pip install 'moeserve[pd]') and taskset", file=sys.stderr)
        return 2
    ports = {k: free_port() for k in ("prefill", "decode", "router", "colocated", "prom")}
    url = {k: f"http://127.0.0.1:{v}" for k, v in ports.items()}
    procs = []
    try:
        procs.append(start(["taskset", "-c", "0", *SERVE, "--port", str(ports["prefill"]), "--kv-role", "prefill",
                            "--reserved-cores", "0"], url["prefill"]))
        procs.append(start(["taskset", "-c", "1", *SERVE, "--port", str(ports["decode"]), "--kv-role", "decode",
                            "--reserved-cores", "0"], url["decode"]))
        procs.append(start([*SERVE, "--port", str(ports["colocated"])], url["colocated"]))
        procs.append(start(["vllm-router", "--vllm-pd-disaggregation", "--prefill", url["prefill"], "--decode",
                            url["decode"], "--host", "127.0.0.1", "--port", str(ports["router"]),
                            "--prometheus-port", str(ports["prom"])], url["router"], "/health"))
        model = httpx.get(url["colocated"] + "/v1/models", timeout=30).json()["data"][0]["id"]
        out = {"config": vars(a)}
        for name, base in (("pd_1p1d", url["router"]), ("colocated", url["colocated"])):
            res = asyncio.run(mixed_load(base, model, a, seed=0))
            out[name] = {"long": brief(res["long"]), "stream": brief(res["stream"]),
                         "output_throughput": res["output_throughput"]}
        nbytes, seconds = metric(url["decode"], "moeserve_kv_transfer_bytes_total"), metric(url["decode"], "moeserve_kv_transfer_seconds_sum")
        reads = metric(url["decode"], "moeserve_kv_transfer_seconds_count")
        out["kv_read"] = {"bytes": nbytes, "reads": reads, "gbps": nbytes / seconds / 1e9 if seconds else None,
                          "memcpy_gbps_same_size": memcpy_gbps(int(nbytes / reads)) if reads else None}
        c, d = out["colocated"]["stream"], out["pd_1p1d"]["stream"]
        out["stream_tpot_p99_ratio_pd_over_colocated"] = (d["tpot_p99_ms"] or 0) / (c["tpot_p99_ms"] or 1)
        out["throughput_ratio_pd_over_colocated"] = out["pd_1p1d"]["output_throughput"] / (out["colocated"]["output_throughput"] or 1)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(30)
    print(json.dumps(out, indent=None if a.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
