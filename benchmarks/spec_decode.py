"""Speculative decoding: the same `moeserve serve` with and without drafts, side by side in one run.

    python benchmarks/spec_decode.py                                     # built-in model, n-gram, 3 drafts
    python benchmarks/spec_decode.py --spec '{"method": "ngram", "num_speculative_tokens": 5}'
    python benchmarks/spec_decode.py --model DIR --spec '{"method": "mtp", "num_speculative_tokens": 1}'

Load: repetitive English prompts (REPETITIVE, or --prompts FILE with one prompt per line), greedy,
`--output-len` tokens each (ignore_eos), `--concurrency` in flight, streamed and measured with
`moeserve bench`. Both servers are started first; then `--rounds` rounds go through the prompts
`--concurrency` at a time, and each such group of requests runs against both servers back to back
(order alternating), so the two measurements of a pair are seconds apart: a shared machine swings
within a minute, and only a ratio taken under one machine state means anything. Reported: each
server's output tok/s (all its output tokens over all its time), and the speed-up as the median of
the pairs' ratios of output tok/s. The drafting server's acceptance (mean acceptance length = 1 +
accepted / drafts, what `moeserve configure --mtp-accept` takes) comes from its /metrics counters
over the timed pairs. Greedy token ids of both servers are compared first: speculation may not
change them.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from statistics import median

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_vs_vllm import Server  # noqa: E402

NGRAM = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'
# text that repeats itself (lists, refrains, quoted dialogue), as code edits, summaries and chats quoting their
# context do: what prompt lookup is for
REPETITIVE = [
    "said he, and she said, and he said, and she said, and he said,",
    "I am sure I am sure I am sure that I am sure that I am sure that",
    "Monday, Tuesday, Wednesday, Thursday, Friday, Monday, Tuesday, Wednesday, Thursday,",
    "The house was very large, and the garden was very large, and the park was very large, and",
    "She walked to the window. She walked to the door. She walked to the window. She walked to the",
    "one, two, three, four, five, one, two, three, four, five, one, two, three,",
    "Elizabeth said nothing. Jane said nothing. Elizabeth said nothing. Jane said",
    "It was a fine day, a very fine day, a fine day indeed, a very fine day, a fine",
]


def items(prompts: list[str], output_len: int) -> list:
    from moeserve.server.bench import Item

    return [Item(p, max(1, len(p) // 4), output_len) for p in prompts]


def bench_args(url: str, model: str, args: argparse.Namespace, n: int) -> argparse.Namespace:
    from moeserve.server import bench as mbench

    p = argparse.ArgumentParser()
    mbench.add_arguments(p)
    return p.parse_args(["--base-url", url, "--model", model, "--num-requests", str(n), "--concurrency",
                         str(args.concurrency), "--warmup", "0", "--temperature", "0"])


def one_round(url: str, model: str, args: argparse.Namespace, prompts: list[str]) -> dict:
    from moeserve.server import bench as mbench
    from moeserve.server.bench_stats import spec_decode_summary, summarize

    metrics: dict[str, str] = {}
    records, seconds = asyncio.run(mbench.run_load(bench_args(url, model, args, len(prompts)),
                                                   items(prompts, args.output_len), metrics))
    out = summarize(records, seconds, None, None)
    out["spec_decode"] = spec_decode_summary(metrics.get("before", ""), metrics.get("after", ""))
    return out


def greedy_ids(url: str, model: str, prompts: list[str], n: int) -> list[list[int]]:
    out = []
    for prompt in prompts:
        r = httpx.post(url + "/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": n,
                                                       "temperature": 0, "ignore_eos": True, "return_token_ids": True},
                       timeout=600)
        r.raise_for_status()
        out.append(r.json()["choices"][0]["token_ids"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="checkpoint dir (default: the built-in model)")
    ap.add_argument("--spec", default=NGRAM, help=f"the drafting server's --speculative-config (default {NGRAM})")
    ap.add_argument("--prompts", default=None, help="a file of prompts, one per line (default: REPETITIVE)")
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--serve-args", default="", help="more `moeserve serve` flags for both servers")
    ap.add_argument("--json", default=None, metavar="PATH", help="write the summary and every pair's numbers here")
    args = ap.parse_args()
    prompts = Path(args.prompts).read_text().splitlines() if args.prompts else REPETITIVE
    base = [sys.executable, "-m", "moeserve.cli", "serve", "--port", "0", "--log-level", "info",
            *(["--model", args.model] if args.model else []), *args.serve_args.split()]
    servers = {"plain": Server(base), "spec": Server(base + ["--speculative-config", args.spec])}
    try:
        for s in servers.values():
            s.wait_ready()
        model = httpx.get(servers["plain"].url + "/v1/models").json()["data"][0]["id"]
        ids = {name: greedy_ids(s.url, model, prompts[:2], args.output_len) for name, s in servers.items()}
        same = ids["plain"] == ids["spec"]
        print(f"greedy token ids identical with and without drafts: {same}")
        names = list(servers)
        for name in names:  # one untimed pass each: kernels built for every step size the load meets
            one_round(servers[name].url, model, args, prompts[: args.concurrency])
        pairs: list[dict[str, dict]] = []
        groups = [prompts[i : i + args.concurrency] for i in range(0, len(prompts), args.concurrency)]
        for r in range(args.rounds):
            for g, group in enumerate(groups):
                order = names if (r * len(groups) + g) % 2 == 0 else names[::-1]
                pairs.append({name: one_round(servers[name].url, model, args, group) for name in order})
            recent = pairs[-len(groups):]
            print(f"round {r + 1}: " + ", ".join(
                f"{n} {sum(p[n]['output_tokens'] for p in recent) / sum(p[n]['duration_s'] for p in recent):.1f} tok/s"
                for n in names))
    finally:
        for s in servers.values():
            s.stop()

    def tok_s(name: str) -> float:
        return sum(p[name]["output_tokens"] for p in pairs) / sum(p[name]["duration_s"] for p in pairs)

    ratios = [p["spec"]["output_throughput"] / p["plain"]["output_throughput"] for p in pairs]
    spec = [p["spec"]["spec_decode"] for p in pairs if p["spec"]["spec_decode"]]
    drafts = sum(s["num_drafts"] for s in spec)
    accepted = sum(s["num_accepted_tokens"] for s in spec)
    per_pos = [sum((s["per_position_acceptance_rate"][j] or 0.0) * s["num_drafts"] for s in spec) / max(1, drafts)
               for j in range(len(spec[0]["per_position_acceptance_rate"]))] if spec else None
    summary = {
        "model": args.model or "built-in", "spec": json.loads(args.spec), "concurrency": args.concurrency,
        "output_len": args.output_len, "prompts": len(prompts), "rounds": args.rounds, "num_pairs": len(pairs),
        "greedy_identical": same, "plain_tok_s": tok_s("plain"), "spec_tok_s": tok_s("spec"),
        "speedup_median": median(ratios), "speedup_of_totals": tok_s("spec") / tok_s("plain"), "speedups": ratios,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "acceptance_rate": accepted / max(1, sum(s["num_draft_tokens"] for s in spec)),
        "per_position_acceptance_rate": per_pos,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "speedups"}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(dict(summary, pairs=pairs), indent=2) + "\n")


if __name__ == "__main__":
    main()
