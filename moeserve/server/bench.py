"""`moeserve bench`: a bounded load generator for any OpenAI-compatible server (moeserve, vLLM, ...).

Each request streams (`stream: true`, `stream_options.include_usage`), so the client sees every
token arrive: TTFT is send -> first token chunk, ITL the gaps between token chunks, TPOT
(e2e - TTFT) / (output tokens - 1), output tokens from the final usage chunk. Random prompts are
token-id lists (exact input lengths, no tokenizer needed; `--tokenizer DIR` picks ids from a real
vocabulary) sent with `ignore_eos` so outputs have exactly the asked length. Load is either a fixed
concurrency (all requests queued, N in flight) or a Poisson arrival rate (optionally capped by
--concurrency). The run is bounded by --num-requests and --timeout-s per request. A server that
exports speculative decoding counters on /metrics (moeserve's, vLLM's) gets their change over the
timed run in the summary: drafts, acceptance rate, mean acceptance length, acceptance per position.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from moeserve.cli_files import check_output
from moeserve.server.bench_stats import RequestRecord, format_table, spec_decode_summary, summarize


@dataclass
class Item:
    prompt: str | list[int]
    input_len: int  # best estimate before the server's usage says
    output_len: int


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", default="http://127.0.0.1:8000", help="server root, e.g. http://127.0.0.1:8000 (without /v1)")
    p.add_argument("--model", required=True, help="model name to send (see GET /v1/models)")
    p.add_argument("--api-key", default=None, help="sent as 'Authorization: Bearer KEY'")
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions", help="which API to load")
    p.add_argument("--num-requests", type=int, default=64, help="requests to send (the run ends after these)")
    p.add_argument("--concurrency", type=int, default=8, help="most requests in flight (0 = unbounded, only with --request-rate)")
    p.add_argument("--request-rate", type=float, default=None, help="Poisson arrivals per second (default: all at once, bounded by --concurrency)")
    p.add_argument("--input-len", type=int, default=32, help="prompt tokens of random prompts")
    p.add_argument("--output-len", type=int, default=32, help="tokens to generate per request")
    p.add_argument("--range-ratio", type=float, default=0.0, help="random lengths vary uniformly by this fraction")
    p.add_argument("--dataset", default=None, help='JSONL file: {"prompt": str or [ids], "output_len": N} per line')
    p.add_argument("--tokenizer", default=None, help="checkpoint dir whose vocabulary random prompts draw from")
    p.add_argument("--vocab-size", type=int, default=500,
                   help="random token ids are drawn from [10, this) without --tokenizer (the default fits any model "
                        "with 500 tokens or more, the built-in one's 741 included)")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature sent with each request")
    p.add_argument("--extra-body", type=_json_object, default=None, metavar="JSON",
                   help="more fields for every request body, e.g. '{\"structured_outputs\": {\"regex\": \"[a-z ]+\"}}'")
    p.add_argument("--seed", type=int, default=0, help="seeds prompts and arrival times")
    p.add_argument("--warmup", type=int, default=1, help="untimed requests sent first")
    p.add_argument("--timeout-s", type=float, default=300.0, help="per-request timeout")
    p.add_argument("--slo-ttft-ms", type=float, default=None, help="goodput counts requests with TTFT at most this")
    p.add_argument("--slo-tpot-ms", type=float, default=None, help="goodput counts requests with TPOT at most this")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON to PATH ('-' = stdout, no table)")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not valid JSON") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


class BenchInputError(Exception):
    """Input the load generator cannot use (a dataset, a tokenizer): one line for the user, no traceback."""


def _random_items(args: argparse.Namespace, rng: random.Random) -> list[Item]:
    low, high, banned = 10, args.vocab_size, set()
    if args.tokenizer:
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(args.tokenizer)
        except Exception as e:  # noqa: BLE001 - transformers raises many kinds for a bad directory
            raise BenchInputError(f"cannot load a tokenizer from {args.tokenizer!r}: {type(e).__name__}") from None
        low, high, banned = 0, len(tok), set(tok.all_special_ids)

    def length(mean: int) -> int:
        return max(1, int(rng.uniform(mean * (1 - args.range_ratio), mean * (1 + args.range_ratio)) + 0.5))

    items = []
    for _ in range(args.num_requests):
        n = length(args.input_len)
        ids: list[int] = []
        while len(ids) < n:
            t = rng.randrange(low, high)
            if t not in banned:
                ids.append(t)
        items.append(Item(ids, n, length(args.output_len)))
    return items


def _dataset_items(args: argparse.Namespace) -> list[Item]:
    """The requests of a JSONL file, one object per line: "prompt" (text, or a list of token ids) and
    "output_len" (or "max_tokens"; default --output-len). Any line it cannot use is an error that
    names the line, before anything is sent."""
    try:
        with open(args.dataset, encoding="utf-8") as f:
            lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise BenchInputError(f"cannot read --dataset {args.dataset!r}: {getattr(e, 'strerror', None) or e}") from None
    if not lines:
        raise BenchInputError(f"--dataset {args.dataset!r} has no requests")
    rows = [_dataset_row(args, n, line) for n, line in lines]
    return [rows[i % len(rows)] for i in range(args.num_requests)]


def _dataset_row(args: argparse.Namespace, n: int, line: str) -> Item:
    where = f"--dataset {args.dataset!r}, line {n}"
    try:
        row = json.loads(line)
    except ValueError:
        raise BenchInputError(f"{where}: not valid JSON") from None
    if not isinstance(row, dict):
        raise BenchInputError(f'{where}: want an object like {{"prompt": "...", "output_len": 32}}')
    prompt = row.get("prompt")
    is_ids = isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    if not (isinstance(prompt, str) or is_ids) or not prompt:
        raise BenchInputError(f'{where}: "prompt" must be a non-empty string or list of token ids')
    out = row.get("output_len", row.get("max_tokens", args.output_len))
    if not isinstance(out, int) or isinstance(out, bool) or out < 1:
        raise BenchInputError(f'{where}: "output_len" must be a whole number >= 1, got {json.dumps(out)[:40]}')
    return Item(prompt, len(prompt) if is_ids else len(prompt.split()), out)


def _payload(args: argparse.Namespace, item: Item) -> tuple[str, dict[str, Any]]:
    common = {"model": args.model, "max_tokens": item.output_len, "temperature": args.temperature,
              "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True, **(args.extra_body or {})}
    if args.endpoint == "chat":  # text prompts only: run() refuses token-id prompts for chat first
        return "/v1/chat/completions", dict(common, messages=[{"role": "user", "content": item.prompt}])
    return "/v1/completions", dict(common, prompt=item.prompt)


def _is_token_chunk(choice: dict[str, Any]) -> bool:
    """Servers send one chunk per engine step with new tokens, its text possibly empty (a partial
    UTF-8 character); chat's first chunk only announces the role."""
    if "delta" in choice:
        delta = choice["delta"]
        return not ("role" in delta and not delta.get("content"))
    return "text" in choice


async def _one(http: Any, base_url: str, args: argparse.Namespace, item: Item) -> RequestRecord:
    """One streamed request on the aiohttp session `http`; every failure is a failed record."""
    path, body = _payload(args, item)
    rec = RequestRecord(ok=False, input_tokens=item.input_len)
    start = time.perf_counter()
    last = None
    chunks = 0
    try:
        async with http.post(base_url + path, json=body) as resp:
            if resp.status != 200:
                text = (await resp.read()).decode(errors="replace")
                rec.error = f"HTTP {resp.status}: {_error_message(text)}"
                return rec
            async for raw in resp.content:  # one SSE line at a time
                if not raw.startswith(b"data:"):
                    continue
                data = raw[5:].strip()
                if data == b"[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:
                    rec.error = f"stream error: {_error_message(data.decode(errors='replace'))}"
                    return rec
                now = time.perf_counter() - start
                if any(_is_token_chunk(c) for c in event.get("choices") or []):
                    chunks += 1
                    if rec.ttft is None:
                        rec.ttft = now
                    else:
                        rec.itls.append(now - last)
                    last = now
                if event.get("usage"):
                    rec.output_tokens = int(event["usage"]["completion_tokens"])
                    rec.input_tokens = int(event["usage"]["prompt_tokens"])
    except Exception as e:  # noqa: BLE001 - a client-side failure (connection, timeout, malformed event) is a
        # failed request, not a crashed benchmark
        rec.error = type(e).__name__
        return rec
    rec.e2e = time.perf_counter() - start
    rec.output_tokens = rec.output_tokens or chunks
    rec.ok = rec.ttft is not None
    if not rec.ok:
        rec.error = "no tokens received"
    return rec


def _error_message(text: str) -> str:
    try:
        return str(json.loads(text)["error"]["message"])[:120]
    except (ValueError, KeyError, TypeError):
        return text[:120]


async def run_load(args: argparse.Namespace, items: list[Item],
                   metrics: dict[str, str] | None = None) -> tuple[list[RequestRecord], float]:
    """Sends `items` (warm-up first, untimed) and returns their records and the timed run's seconds.
    metrics: when given, the server's /metrics text is kept under "before" and "after" the timed run
    (its speculative decoding counters, bench_stats.spec_decode_summary).

    The client is aiohttp, as vLLM's `bench serve` uses: on the 2-core machines the load generator
    shares a core with the server's front end, and httpx's pure-Python streaming cost ~3x more CPU
    per request (0.35-0.52 s of client CPU for 64 requests of 32 tokens, against 0.12-0.20 s), which
    showed up in every server's time to first token (docs/server.md).

    The generator's own heap is frozen while it times (`gc.freeze`): in a process that has imported
    torch and transformers, as the benchmarks' has, a full collection walked a million start-up
    objects for 160-180 ms, during which no request is sent and no chunk read: inside a round, that
    pause would land on whichever server was being measured."""
    gc.collect()
    gc.freeze()
    try:
        return await _timed_load(args, items, metrics)
    finally:
        gc.unfreeze()


async def _metrics_text(http: Any, base_url: str) -> str:
    """The server's /metrics page, or "" when it has none (not every OpenAI server serves one)."""
    try:
        async with http.get(f"{base_url}/metrics") as resp:
            return await resp.text() if resp.status == 200 else ""
    except Exception:  # noqa: BLE001 - counters are extra: a server without them is measured all the same
        return ""


async def _timed_load(args: argparse.Namespace, items: list[Item],
                      metrics: dict[str, str] | None = None) -> tuple[list[RequestRecord], float]:
    import aiohttp

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    connector = aiohttp.TCPConnector(limit=args.concurrency or 0)  # 0: no limit
    timeout = aiohttp.ClientTimeout(total=args.timeout_s)
    base_url = args.base_url.rstrip("/")
    async with aiohttp.ClientSession(connector=connector, headers=headers, timeout=timeout,
                                     read_bufsize=2**20) as http:
        for item in items[: args.warmup]:
            await _one(http, base_url, args, item)
        if metrics is not None:
            metrics["before"] = await _metrics_text(http, base_url)
        gate = asyncio.Semaphore(args.concurrency) if args.concurrency else None
        rng = random.Random(args.seed + 1)

        async def limited(item: Item) -> RequestRecord:
            if gate is None:
                return await _one(http, base_url, args, item)
            async with gate:
                return await _one(http, base_url, args, item)

        start = time.perf_counter()
        tasks = []
        for item in items:
            if args.request_rate:
                await asyncio.sleep(rng.expovariate(args.request_rate))
            tasks.append(asyncio.create_task(limited(item)))
        records = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
        if metrics is not None:  # counters reach /metrics with the engine's next heartbeat: read until settled
            after, deadline = await _metrics_text(http, base_url), time.monotonic() + 3.0
            while time.monotonic() < deadline:
                await asyncio.sleep(0.3)
                again = await _metrics_text(http, base_url)
                if again == after:
                    break
                after = again
            metrics["after"] = after
        return list(records), duration


def _check(args: argparse.Namespace) -> str | None:
    if args.num_requests < 1:
        return "--num-requests must be >= 1"
    if args.concurrency < 0 or (args.concurrency == 0 and not args.request_rate):
        return "--concurrency must be >= 1 (or 0 together with --request-rate)"
    if args.request_rate is not None and not 0 < args.request_rate < math.inf:  # NaN slept NaN seconds
        return f"--request-rate must be a positive number of requests a second, got {args.request_rate}"
    if args.input_len < 1 or args.output_len < 1 or not 0 <= args.range_ratio < 1:
        return "--input-len and --output-len must be >= 1 and --range-ratio in [0, 1)"
    if not args.dataset and not args.tokenizer and args.vocab_size <= 10:
        return "--vocab-size must be > 10 (random token ids are drawn from [10, vocab-size))"
    if args.warmup < 0:
        return "--warmup must be >= 0"
    if not 0 < args.timeout_s < math.inf:  # the run is bounded by it
        return f"--timeout-s must be a positive number of seconds, got {args.timeout_s}"
    if any(v is not None and not v > 0 for v in (args.slo_ttft_ms, args.slo_tpot_ms)):
        return "--slo-ttft-ms and --slo-tpot-ms must be > 0"
    if args.json is not None and args.json != "-":  # checked before the run, not after it
        try:
            check_output("--json", args.json, "bench.json")
        except ValueError as e:
            return str(e)
    url = urlsplit(args.base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        return f"--base-url {args.base_url!r} is not an http:// or https:// URL with a host (e.g. http://127.0.0.1:8000)"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _check(args)
    try:
        if problem:
            raise BenchInputError(problem)
        rng = random.Random(args.seed)
        items = _dataset_items(args) if args.dataset else _random_items(args, rng)
        if args.endpoint == "chat" and not all(isinstance(item.prompt, str) for item in items):
            raise BenchInputError("--endpoint chat needs text prompts (--dataset with strings)")
    except BenchInputError as e:
        print(f"moeserve bench: error: {e}", file=sys.stderr)
        return 2
    metrics: dict[str, str] = {}
    records, duration = asyncio.run(run_load(args, items, metrics))
    summary = summarize(records, duration, args.slo_ttft_ms, args.slo_tpot_ms)
    summary["spec_decode"] = spec_decode_summary(metrics.get("before", ""), metrics.get("after", ""))
    summary["config"] = {k: v for k, v in vars(args).items() if not k.startswith("_") and k != "api_key"}
    if args.json != "-":
        print(format_table(summary))
    if args.json:
        text = json.dumps(summary, indent=2, allow_nan=False)
        if args.json == "-":
            print(text)
        else:
            try:
                with open(args.json, "w") as f:
                    f.write(text + "\n")
            except OSError as e:
                print(f"moeserve bench: error: --json: cannot write {args.json}: {e.strerror or e}", file=sys.stderr)
                return 2
    return 0 if summary["completed"] else 1
