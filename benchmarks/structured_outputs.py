"""Constrained decoding against unconstrained on one `moeserve serve`, same load, one run.

    python benchmarks/structured_outputs.py [--rounds 20] [--num-requests 32] [--concurrency 8] [--json out.json]

The built-in model. Each round runs `moeserve bench`'s load twice, back to back in an order rotated
each round: unconstrained, and with `structured_outputs: {"json": SCHEMA}`, a schema whose shortest
answer is longer than --output-len, so both loads generate exactly --output-len tokens per request
(ignore_eos; a grammar could end a request early only where its answer is complete). Reported: the
median of the per-round ratios of output tok/s, and the pooled ratio (each kind's tokens over its
seconds, all rounds), which a shared machine's swings within a round bias less. Every schema is compiled once before the rounds
(untimed warm-up requests), so the rounds time the per-token cost: the bitmask filled on the host,
applied to the logits, and each matcher's advance. Compiling is timed apart, in this process, with
xgrammar's cache off (`compile_ms`, for the built-in tokenizer's 4096 tokens), and so is the host's
sampling of one step for --concurrency requests with and without their grammars
(`sampling_ms_per_step`, interleaved): the per-step cost alone, which the serving numbers carry under
the noise of a shared machine.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_vs_vllm import Server  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# records of at least 40 objects: the shortest answer is ~400 tokens, longer than any --output-len here
SCHEMA = {"type": "array", "minItems": 40, "items": {
    "type": "object", "additionalProperties": False, "required": ["id", "name", "tags", "ok"],
    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 9999},
                   "name": {"type": "string", "maxLength": 24},
                   "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "maxItems": 3},
                   "ok": {"type": "boolean"}}}}
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "address"],
          "properties": {"name": {"type": "string", "pattern": "^[A-Z][a-z]{1,15}$"},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "address": {"type": "object", "required": ["city", "zip"],
                                     "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}}}


def compile_times(reps: int = 5) -> dict[str, float]:
    """Median ms to compile each constraint for the built-in tokenizer, without xgrammar's cache."""
    import xgrammar as xgr

    from moeserve.engine.builtin_model import VOCAB_SIZE, build_tokenizer

    info = xgr.TokenizerInfo.from_huggingface(build_tokenizer(), vocab_size=VOCAB_SIZE)
    compiler = xgr.GrammarCompiler(info, max_threads=4, cache_enabled=False)
    cases = {"json_schema (records)": lambda: compiler.compile_json_schema(json.dumps(SCHEMA), any_whitespace=False),
             "json_schema (person)": lambda: compiler.compile_json_schema(json.dumps(PERSON), any_whitespace=False),
             "json_object": lambda: compiler.compile_json_schema('{"type": "object"}', any_whitespace=False),
             "regex": lambda: compiler.compile_regex(r"[A-Z][a-z]+ (is|was) [0-9]{1,3} years old\."),
             "choice": lambda: compiler.compile_grammar('root ::= "yes" | "no" | "maybe"')}
    out = {}
    for name, fn in cases.items():
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(1000 * (time.perf_counter() - start))
        out[name] = median(times)
    return out


def sampling_ms(rows: int = 8, steps: int = 200) -> dict[str, float]:
    """Median ms of one step's sampling for `rows` requests at temperature 0.8, in this process (one
    thread), without and with their grammars: what the constraint adds to a step on the host (the
    mask's fill, its application to the logits, each matcher's advance)."""
    import torch

    from moeserve.core.step_plan import NewRequest
    from moeserve.engine.builtin_model import VOCAB_SIZE, builtin_model_dir
    from moeserve.engine.grammar_book import GrammarBook
    from moeserve.engine.sampler import Sampler
    from moeserve.sampling_params import SamplingParams

    torch.set_num_threads(1)
    ids = [f"r{i}" for i in range(rows)]
    book, sampler = GrammarBook(str(builtin_model_dir()), VOCAB_SIZE), Sampler()
    for rid in ids:
        new = NewRequest(rid, SamplingParams(temperature=0.8, structured_outputs={"json": SCHEMA}, eos_token_ids=[0, 2]))
        book.add(new)
        sampler.add(new)
    logits = torch.randn(rows, VOCAB_SIZE, generator=torch.Generator().manual_seed(0))
    book.accept(ids, [o.token_id for o in sampler.sample(logits, ids, allowed=book.bitmask(ids))])  # matchers made

    def step(constrained: bool) -> float:
        start = time.perf_counter()
        out = sampler.sample(logits, ids, allowed=book.bitmask(ids) if constrained else None)
        if constrained:
            book.accept(ids, [o.token_id for o in out])
        return 1000 * (time.perf_counter() - start)

    times = {"free": [], "constrained": []}
    for _ in range(steps):  # interleaved, so both see the same machine
        for name in times:
            times[name].append(step(name == "constrained"))
    return {name: median(t) for name, t in times.items()}


def load(url: str, model: str, args: argparse.Namespace, seed: int, extra: dict | None):
    """One load (`moeserve bench`'s generator in this process): its summary."""
    import asyncio

    from moeserve.server import bench as mbench
    from moeserve.server.bench_stats import summarize

    p = argparse.ArgumentParser()
    mbench.add_arguments(p)
    argv = ["--base-url", url, "--model", model, "--num-requests", str(args.num_requests), "--concurrency",
            str(args.concurrency), "--input-len", str(args.input_len), "--output-len", str(args.output_len),
            "--vocab-size", "4000", "--warmup", "0", "--seed", str(seed), "--temperature", str(args.temperature)]
    if extra:
        argv += ["--extra-body", json.dumps(extra)]
    bargs = p.parse_args(argv)
    records, seconds = asyncio.run(mbench.run_load(bargs, mbench._random_items(bargs, random.Random(seed))))
    failed = [r.error for r in records if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed, e.g. {failed[0]}")
    return summarize(records, seconds, None, None)


def pooled(rounds: list[dict], name: str) -> float:
    """Output tokens per second over every round of one kind."""
    tokens = sum(g[name]["output_throughput"] * g[name]["duration_s"] for g in rounds)
    return tokens / sum(g[name]["duration_s"] for g in rounds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--num-requests", type=int, default=32, help="requests of one load (each round runs two)")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--json", default=None, metavar="PATH", help="also write the raw figures here")
    args = p.parse_args(argv)
    compile_ms = compile_times()
    sample_ms = sampling_ms(args.concurrency)
    server = Server([sys.executable, "-m", "moeserve.cli", "serve", "--port", "0"])
    try:
        url = server.wait_ready()
        model = "moeserve-tiny-moe"
        constrained = {"structured_outputs": {"json": SCHEMA}}
        for extra in (None, constrained):  # compile on the server, and warm both paths, untimed
            load(url, model, argparse.Namespace(**{**vars(args), "num_requests": 8}), 10**6, extra)
        rounds = []
        for r in range(args.rounds):
            order = [("free", None), ("constrained", constrained)]
            got = {}
            for name, extra in order[r % 2:] + order[:r % 2]:
                got[name] = load(url, model, args, r, extra)
            rounds.append(got)
            print(f"round {r}: " + ", ".join(f"{n} {got[n]['output_throughput']:.0f} tok/s (TPOT p50 "
                                              f"{got[n]['tpot_ms']['p50']:.2f} ms)" for n in ("free", "constrained")),
                  flush=True)
    finally:
        server.stop()
    ratios = [g["constrained"]["output_throughput"] / g["free"]["output_throughput"] for g in rounds]
    result = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.processor() or platform.machine()}, "
        f"{__import__('os').cpu_count()} cores", "command": "python benchmarks/structured_outputs.py " + " ".join(argv or sys.argv[1:]),
        "load": {k: getattr(args, k) for k in ("num_requests", "concurrency", "input_len", "output_len", "temperature")},
        "compile_ms": compile_ms,
        "sampling_ms_per_step": sample_ms,
        "output_tok_s": {name: median(g[name]["output_throughput"] for g in rounds) for name in ("free", "constrained")},
        "tpot_ms_p50": {name: median(g[name]["tpot_ms"]["p50"] for g in rounds) for name in ("free", "constrained")},
        "ratio_constrained_over_free": median(ratios), "ratios": ratios,
        # every round's tokens over every round's seconds: a round the machine slowed weighs by its time
        "pooled_ratio_constrained_over_free": pooled(rounds, "constrained") / pooled(rounds, "free"),
        "tpot_ratio_constrained_over_free": median(g["constrained"]["tpot_ms"]["p50"] / g["free"]["tpot_ms"]["p50"]
                                                   for g in rounds),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
