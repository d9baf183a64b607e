"""`moeserve configure`: plan a deployment, or predict a fixed one, from the model's config.json,
a hardware profile and the workload (docs/capacity.md)."""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

from moeserve.capacity import bench_run, planner, report, sizing, track_record
from moeserve.capacity.balance import ASSUMED_PLAIN, ASSUMED_REPLICATED, assumed_balancedness, load_traces
from moeserve.capacity.checkpoint_formats import CheckpointFormats, read_checkpoint
from moeserve.capacity.checkpoint_plan import checkpoint_plan
from moeserve.capacity.draft_head import load_head
from moeserve.capacity.dtypes import WEIGHT_ONLY
from moeserve.capacity.efficiency import DEFAULT
from moeserve.capacity.engine_kv import ENGINE_NAMES, ROCM_CARD_CLASSES, engines_for
from moeserve.capacity.hardware import known_profiles, load_hardware
from moeserve.capacity.layout import Layout, Precision, fill_redundant
from moeserve.capacity.model_spec import ModelSpec, load_model, shipped_models
from moeserve.capacity.predict import ENGINE_PREFILL, PREFILL_MODES, Options, Prediction, Predictor, Workload
from moeserve.cli_files import check_output

DTYPES = ("fp4", "fp8", "bf16", "fp16", "fp32")
# weight flags also take the weight-only formats (W4A16 int4); the KV cache, dispatch and combine do not
WEIGHT_DTYPES = DTYPES + WEIGHT_ONLY
MAX_DRAFT = 4  # the published MTP setups run 1-3 drafts (validation_cases.py); acceptance past ~3 is not reported
# (flag, lowest, highest, lowest allowed itself, highest allowed itself): every number must be finite and in range
BOUNDS = {
    "gpus": (1, planner.MAX_GPUS, True, True), "isl": (1, 10_000_000, True, True), "osl": (1, 10_000_000, True, True),
    "cache_hit": (0, 1, True, False), "isl_cv": (0, 10, True, True), "ttft_slo_ms": (0, 1e9, False, True),
    "tpot_slo_ms": (0, 1e9, False, True),
    # mean/max load over at most MAX_GPUS ranks is at least 1/MAX_GPUS; 1e-300 printed Infinity into --json
    "balancedness": (1 / planner.MAX_GPUS, 1, True, True), "tp": (1, 1024, True, True),
    "ep": (1, planner.MAX_GPUS, True, True), "moe_tp": (1, 1024, True, True), "batch": (0, 1e7, False, True),
    "pp": (1, 4096, True, True),
    "mtp_accept": (1, MAX_DRAFT + 1, True, True), "mtp_draft": (0, MAX_DRAFT, True, True),
    "memory_fraction": (0, 1, False, True), "top": (1, 1000, True, True), "gemm_min_tile": (1, 256, True, True),
    "num_prompts": (1, 100_000, True, True), "request_rate": (0, 1e6, False, True), "max_num_seqs": (1, 1_000_000, True, True),
    "max_concurrency": (1, 1_000_000, True, True), "target_rate": (0, 1e7, False, True),
}
MAX_GPU_PRICE = 1e6



def _finite(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        return value
    parse.__name__ = kind.__name__
    return parse


def _redundant(text: str):
    return "auto" if text == "auto" else _finite(int)(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.error = _one_line_error(p)
    num, integer = _finite(float), _finite(int)
    p.add_argument("--model", help=f"checkpoint directory, config.json, or a shipped name ({', '.join(shipped_models())}); "
                   "default: the built-in tiny MoE")
    p.add_argument("--hardware", help=f"profile name ({', '.join(known_profiles())}) or a profile YAML file; several, "
                   "comma-separated (h200,b200), compare the best deployment on each")
    p.add_argument("--gpus", type=integer, help=f"GPUs (ranks) to plan for, 1-{planner.MAX_GPUS} (default: the fixed layout's world, else 8)")
    p.add_argument("--target-rate", type=num, metavar="R",
                   help="requests a second to serve within the SLOs: plan the fewest GPUs that do (--gpus the most to "
                        "consider); with a fixed layout, the identical instances of it that do")
    p.add_argument("--gpu-price", metavar="USD",
                   help="dollars a GPU-hour (what you pay: rented, or owned over its life), or one a card with several "
                        "--hardware (3.5,6): adds what a million tokens cost to each row, and what --target-rate's GPUs "
                        "cost an hour")
    p.add_argument("--isl", type=integer, default=1024, help="input tokens per request (default 1024)")
    p.add_argument("--osl", type=integer, default=256, help="output tokens per request (default 256)")
    p.add_argument("--cache-hit", type=num, default=0.0, help="share of input tokens found in the prefix cache, [0, 1) (default 0)")
    p.add_argument("--isl-cv", type=num, default=0.0, help="spread of prompt lengths, std / mean, 0-10 (default 0: all --isl long)")
    p.add_argument("--ttft-slo-ms", type=num, help="time-to-first-token objective")
    p.add_argument("--tpot-slo-ms", type=num, help="time-per-output-token objective")
    p.add_argument("--trace", nargs="+", metavar="FILE", help="routing traces: expert balancedness from them (moeserve place --eval)")
    p.add_argument("--plan", metavar="PLAN.json", help="placement plan scored on --trace (default: the robust plan moeserve place makes for each layout ranked)")
    p.add_argument("--balancedness", type=num, help=f"expert balancedness mean/max to assume without traces (default {ASSUMED_PLAIN} at ep > 1 without "
                   f"redundant experts, {ASSUMED_REPLICATED} with one or more per rank)")
    p.add_argument("--phase", choices=("prefill", "decode", "colocated"),
                   help="predict this phase: of the fixed layout --tp/--ep/--moe-tp/--redundant/--batch give, else "
                        "rank that phase's layouts over --gpus (default: colocated and prefill/decode splits ranked)")
    p.add_argument("--tp", type=integer, help="fixed layout: tensor-parallel degree of attention and dense layers")
    p.add_argument("--ep", type=integer, help="fixed layout: expert-parallel degree (expert groups)")
    p.add_argument("--moe-tp", type=integer, help="fixed layout: split each expert's width over this many ranks of its EP group "
                   "(MoE TP x EP; world = ep x moe-tp; default: experts split over --tp at --ep 1, whole experts at --ep > 1)")
    p.add_argument("--pp", type=integer, help="pipeline-parallel stages (vLLM's and TensorRT-LLM's "
                   "--pipeline-parallel-size): each stage the layout over its GPUs and 1/pp of the layers; GPUs = "
                   "world x pp; for a fixed layout and for every ranked one (default 1; moeserve serve runs none: --emit "
                   "refuses it)")
    p.add_argument("--redundant", type=_redundant, default="auto", help="fixed layout: redundant expert slots over the EP ranks, "
                   "or auto (default): the fewest that split the experts evenly over --ep")
    p.add_argument("--batch", type=num, help="fixed layout: decode sequences per GPU, or prefill tokens per GPU per step "
                   "(default: the best that fits and meets the SLOs)")
    p.add_argument("--mtp-accept", type=num, default=1.0, help="mean tokens per decode step with speculative decoding (1 + accepted drafts; default 1: "
                   "off): the model's MTP module drafts, or without one its EAGLE-3 head (--draft-model)")
    p.add_argument("--mtp-draft", type=integer, help=f"draft tokens per step, 0-{MAX_DRAFT} (default: the fewest that can yield --mtp-accept)")
    p.add_argument("--draft-model", metavar="DIR", help="draft with this EAGLE-3 head (its directory or config.json) "
                   "instead of the model's MTP module (default: the MTP module; a model without one drafts with its "
                   "EAGLE-3 head: the shipped one's shape, else one assumed from the model's)")
    p.add_argument("--tbo", action="store_true", help="two-batch overlap of communication with compute")
    p.add_argument("--sbo", action="store_true", help="single-batch overlap: dispatch behind the shared expert, combine "
                   "behind the experts' down projection (SGLang's --enable-single-batch-overlap)")
    p.add_argument("--no-cuda-graphs", action="store_true", help="eager kernel launches")
    p.add_argument("--colocated-prefill", choices=PREFILL_MODES, action=_PrefillMode,
                   help="colocated: how prefill shares the GPUs with the running decodes (default: --engine's "
                   "scheduler, separate for sglang, else mixed): mixed: prefill "
                   "chunks, the decodes ride in each chunk's step, as vLLM V1 and TensorRT-LLM's in-flight batching "
                   "schedule them; stalled: chunks as forwards of their own, the decodes wait (SGLang without "
                   "--enable-mixed-chunk); separate: each prefill an eager forward pass of its own of the prompts that "
                   "arrived since the last (SGLang without --enable-mixed-chunk, with --batch requests kept in flight); "
                   "separate-compiled: the same passes run compiled, without an eager layer's host time (ROCm ATOM's "
                   "server, whose forward torch.compile compiles)")
    p.add_argument("--separate-prefill", dest="colocated_prefill", nargs=0, const="separate", action=_PrefillMode,
                   help="deprecated: --colocated-prefill separate")
    p.add_argument("--no-mixed-steps", dest="colocated_prefill", nargs=0, const="stalled", action=_PrefillMode,
                   help="deprecated: --colocated-prefill stalled")
    p.add_argument("--engine", choices=sorted(ENGINE_NAMES), help="plan the KV cache in the format this engine runs "
                   "the checkpoint in by default and colocated prefill as its default scheduler runs it (unless "
                   "--colocated-prefill says), and count only its published deployments in the track record printed "
                   "under the table (the model takes no other engine property)")
    p.add_argument("--offload-weights", action="store_true", help="prefill: the routed experts of the fewest MoE layers that "
                   "let the rest fit live in host memory, streamed over the host link behind the resident layers (Grace "
                   "memory on GB200/GB300)")
    p.add_argument("--weights", choices=WEIGHT_DTYPES, help="format of every linear layer unless set below (default: a checkpoint "
                   "directory's own formats, read from its quantization_config or hf_quant_config.json; fp8 for a shipped "
                   "name where the hardware has FP8 (gpt-oss: its release's MXFP4 experts, bf16 elsewhere), else fp32; with --emit what moeserve serve runs the checkpoint in: on GPUs "
                   "block FP8 kept, the rest bf16)")
    p.add_argument("--attn-weights", choices=WEIGHT_DTYPES, help="attention projections' format (default --weights)")
    p.add_argument("--moe-weights", choices=WEIGHT_DTYPES, help="routed experts' format (default --weights)")
    p.add_argument("--dense-weights", choices=WEIGHT_DTYPES, help="dense MLPs' and shared experts' format (default --weights)")
    p.add_argument("--mtp-weights", choices=WEIGHT_DTYPES, help="the MTP module's format (default: as the main model's modules; "
                   "TensorRT-LLM's min-latency recipe keeps it bf16)")
    p.add_argument("--kv-dtype", choices=DTYPES, help="KV cache format; attention computes in it where the card has FP8 "
                   "tensor cores (default: what --engine runs the checkpoint's in, without --engine the format the "
                   "checkpoint declares; else bf16 on GPUs, fp32 on CPUs)")
    p.add_argument("--dispatch-dtype", choices=DTYPES, help="format tokens go to the experts in (default the experts' "
                   "format when they run fp8 or fp4: fp8 + per-128 scales or NVFP4, else the activation format)")
    p.add_argument("--combine-dtype", choices=DTYPES, help="format expert outputs come back in (default the activation format)")
    p.add_argument("--gemm-min-tile", type=integer, help="smallest row tile of the GEMM kernels (the profile's: 64 on Hopper; "
                   "32 for DeepGEMM's swapAB kernels)")
    p.add_argument("--memory-fraction", type=num, default=0.9, help="share of device memory the engine may use, (0, 1] (default 0.9)")
    p.add_argument("--num-prompts", type=integer, help="also replay a benchmark run of this many prompts on the winner "
                   "(vllm bench serve / sglang bench_serving without --max-concurrency): the run's output rate, mean "
                   "TPOT and TTFT while the batch fills and drains (1-100000)")
    p.add_argument("--length-dist", type=_length_dist, default="fixed", help="--num-prompts: request lengths around --isl / "
                   "--osl: fixed, uniform:R (mean x [1-R, 1+R]) or exponential (chat datasets such as ShareGPT; "
                   "default fixed)")
    p.add_argument("--request-rate", type=num, help="--num-prompts: requests a second (default: all at once)")
    p.add_argument("--max-concurrency", type=integer, help="--num-prompts: requests in flight at most, the next sent as "
                   "one finishes (the benchmarks' --max-concurrency; default: no cap)")
    p.add_argument("--max-num-seqs", type=integer, default=bench_run.DEFAULT_MAX_SEQS, help="--num-prompts: sequences "
                   f"one scheduler runs at most (the engine's --max-num-seqs; default {bench_run.DEFAULT_MAX_SEQS}, vLLM's)")
    p.add_argument("--top", type=integer, default=10, help="rows of the ranked table, 1-1000 (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--emit", metavar="serve.yaml", help="write the winner's `moeserve serve --config` file(s) (a P/D winner "
                   "also writes NAME.prefill.yaml); plans in the formats moeserve serve runs the checkpoint in (on GPUs "
                   "the triton kernels: fp8 weights kept or --weights fp8 as quantization: fp8, --kv-dtype fp8 as "
                   "kv_cache_dtype: fp8)")
    p.add_argument("--calibrate", nargs="?", const="cpu-calibrated.yaml", metavar="OUT.yaml",
                   help="time this machine (about a minute) and write a CPU hardware profile (default cpu-calibrated.yaml)")


def _length_dist(text: str) -> str:
    try:
        bench_run.parse_distribution(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


class _PrefillMode(argparse.Action):
    """--colocated-prefill MODE and its deprecated aliases (--separate-prefill, --no-mixed-steps: nargs=0 and
    the mode as const) set one dest; two flags that name different modes are refused, not resolved by order."""

    def __call__(self, parser, namespace, values, option_string=None):
        mode = self.const if self.nargs == 0 else values
        given = getattr(namespace, "_colocated_prefill_flag", None)
        if given is not None and getattr(namespace, self.dest) != mode:
            parser.error(f"{_named(option_string, mode)} contradicts {_named(given, getattr(namespace, self.dest))}: "
                         "give one --colocated-prefill")
        setattr(namespace, self.dest, mode)
        setattr(namespace, "_colocated_prefill_flag", option_string)
        if self.nargs == 0:  # warned about once parsing is through (a refusal stays one line)
            setattr(namespace, "_colocated_prefill_alias", option_string)


def _named(flag: str, mode: str) -> str:
    return f"{flag} {mode}" if flag == "--colocated-prefill" else f"{flag} (--colocated-prefill {mode})"


def _one_line_error(parser: argparse.ArgumentParser):
    """argparse's error, as one line (usage stays behind --help)."""
    def error(message: str):
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)
    return error


def _fail(msg: str) -> int:
    print(f"moeserve configure: error: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    alias = getattr(args, "_colocated_prefill_alias", None)
    if alias:
        print(f"moeserve configure: warning: {alias} is deprecated: use --colocated-prefill {args.colocated_prefill}",
              file=sys.stderr)
    try:
        return _calibrate(args.calibrate) if args.calibrate is not None else _run(args)
    except ValueError as e:
        return _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)


def _calibrate(path: str) -> int:
    check_output("--calibrate", path, "cpu-calibrated.yaml")  # before the minute of timing, not after it
    from moeserve.capacity.calibrate import write_profile

    try:
        print(write_profile(path))
    except OSError as e:
        raise ValueError(f"--calibrate: cannot write {path}: {e.strerror or e}") from None
    return 0


def _check(args) -> None:
    for name, (lo, hi, lo_in, hi_in) in BOUNDS.items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if not ((lo <= value if lo_in else lo < value) and (value <= hi if hi_in else value < hi)):
            flag = "--" + name.replace("_", "-")
            shown = value if isinstance(value, int) else f"{value:g}"
            raise ValueError(f"{flag} {shown} is out of range: {'[' if lo_in else '('}{lo:g}, {hi:g}{']' if hi_in else ')'}")
    if args.redundant != "auto" and args.redundant < 0:
        raise ValueError(f"--redundant {args.redundant} is out of range: 0 or more, or auto")
    draft = args.mtp_draft if args.mtp_draft is not None else math.ceil(args.mtp_accept - 1 - 1e-9)
    if args.mtp_accept > draft + 1:
        raise ValueError(f"--mtp-accept {args.mtp_accept:g} is more than --mtp-draft {draft} drafts can yield ({draft + 1})")
    if args.draft_model and not draft:
        raise ValueError(f"--draft-model {args.draft_model} drafts nothing without --mtp-accept above 1 (or --mtp-draft)")
    if args.gemm_min_tile is not None and args.gemm_min_tile & (args.gemm_min_tile - 1):
        raise ValueError(f"--gemm-min-tile {args.gemm_min_tile} is not a power of two")
    if args.emit and args.pp and args.pp > 1:
        raise ValueError(f"--emit writes a config moeserve serve runs, and it runs no pipeline parallelism: --pp {args.pp} "
                         "(drop --emit to plan it)")
    if args.plan and not args.trace:
        raise ValueError("--plan is scored on routing traces: pass --trace too")
    if args.emit is not None:
        check_output("--emit", args.emit, "serve.yaml")
    if args.offload_weights and args.phase in ("decode", "colocated"):
        raise ValueError(f"--offload-weights streams weights for prefill only, not --phase {args.phase}")
    if args.hardware is None:
        raise ValueError(f"pass --hardware ({', '.join(known_profiles())}, or a profile YAML)")


def _precision(args, hw, model: ModelSpec, ckpt: CheckpointFormats | None):
    """(formats to plan in, the checkpoint's plan, what --emit's file runs them with): the flags, else the
    checkpoint's (`ckpt`, checkpoint_formats.read_checkpoint; on GPUs, without --emit), else fp8 weights and bf16
    KV on GPUs, fp32 on CPUs; with --emit what moeserve serve runs the checkpoint in (served.py)."""
    gpu = bool(hw.tflops.get("fp8"))
    act = "bf16" if gpu else "fp32"
    default = "fp8" if gpu else "fp32"
    flags = {k: getattr(args, k) for k in ("weights", "attn_weights", "moe_weights", "dense_weights", "mtp_weights", "kv_dtype")}
    plan = checkpoint_plan(ckpt, flags, args.engine, model.is_mla, act, gpu, bool(args.emit),
                           engines_for(hw.card_class)) if ckpt else None
    if args.emit:  # the file must run on moeserve serve: plan in what it runs (refused there when it cannot)
        from moeserve.capacity.served import served_formats

        try:
            served = served_formats(args, gpu, model, ckpt)
        except ValueError as e:
            own = f"; the checkpoint runs in {plan.runs_in()}" if plan else ""
            raise ValueError(f"{e}{own}") from None
        return served.prec, plan, served
    use = plan.defaults if plan else {} if args.weights else _release_defaults(args.model, gpu)
    prec = Precision(weights=args.weights or use.get("weights") or default, kv=args.kv_dtype or use.get("kv") or act,
                     activations=act, attn=args.attn_weights or use.get("attn"), moe=args.moe_weights or use.get("moe"),
                     dense=args.dense_weights or use.get("dense"), dispatch=args.dispatch_dtype,
                     combine=args.combine_dtype, mtp=args.mtp_weights or use.get("mtp"))
    return prec, plan, None


def _release_defaults(source: str | None, gpu: bool) -> dict:
    """Weight formats to plan a shipped name in by default where its only release is 4-bit: gpt-oss ships MXFP4
    routed experts and BF16 elsewhere, and no FP8 release (every other shipped name plans in fp8 on GPUs, a
    format each is released or served in). Empty for the rest and on CPUs."""
    from moeserve.capacity.served import release_config

    if not source or not gpu:
        return {}
    quant = (release_config(source)[0] or {}).get("quantization_config")  # called only without a checkpoint
    if isinstance(quant, dict) and quant.get("quant_method") == "mxfp4":
        return {"weights": "bf16", "moe": "mxfp4"}
    return {}


def _balance(args, model: ModelSpec):
    trace = load_traces(args.trace, model.name, model.num_experts, model.num_moe_layers) if args.trace else None
    cache: dict[tuple, float] = {}

    def balance(lay: Layout) -> float:
        if args.balancedness is not None:
            return args.balancedness
        if lay.ep == 1:
            return 1.0
        if trace is None:
            return assumed_balancedness(lay.ep, lay.redundant)
        key = (lay.ep, lay.redundant)
        if key not in cache:
            from moeserve.capacity.balance import balancedness_from

            cache[key] = balancedness_from(trace, args.plan, lay.ep, lay.redundant)
        return cache[key]
    return balance


def _run(args) -> int:
    one = not args.hardware or "," not in args.hardware or Path(args.hardware).is_file()  # a profile file's name may hold a comma
    cards = [args.hardware] if one else [c.strip() for c in args.hardware.split(",")]
    if len(cards) > 1:
        return _compare(args, cards)
    _check(args)
    return _show(args, _plan(args, _prices(args.gpu_price, 1)[0]))


def _compare(args, cards: list[str]) -> int:
    """Several --hardware cards: the best deployment on each (its first row), side by side, cheapest or fastest first."""
    if args.emit or args.num_prompts:
        raise ValueError(f"{'--emit' if args.emit else '--num-prompts'} is for one card: name one --hardware "
                         f"(not {args.hardware})")
    if len(set(cards)) != len(cards) or not all(cards):
        raise ValueError(f"--hardware {args.hardware}: name each card once")
    prices, plans = _prices(args.gpu_price, len(cards)), []
    for card, price in zip(cards, prices):
        one = argparse.Namespace(**{**vars(args), "hardware": card})
        _check(one)
        try:
            plans.append((card, price, _plan(one, price), None))
        except ValueError as e:
            plans.append((card, price, None, str(e).splitlines()[0]))
    ok = sorted((p for p in plans if p[2]), key=lambda p: _order(p[2], args))
    rows = [report.comparison_row(card, plan["rows"][0], _gpus(args, plan), price) for card, price, plan, _ in ok]
    failed = [(card, why) for card, _, _, why in plans if why]
    w = Workload(args.isl, args.osl, args.cache_hit, args.isl_cv, args.ttft_slo_ms, args.tpot_slo_ms)
    model = load_model(args.model)
    if args.json:
        out = {"model": model.name, "workload": vars(w) | {}, "target_rate": args.target_rate,
               "comparison": [{**r, "precision": report.precision_fields(plan["prec"]), "notes": plan["notes"],
                               "track_record": plan["past"].as_dict() if plan["past"] else None,
                               "sizing": plan["sized"].as_dict() if plan["sized"] else None}
                              for r, (_, _, plan, _) in zip(rows, ok)]
               + [{"hardware": card, "error": why} for card, why in failed]}
        print(json.dumps(out, indent=2, default=float))
    else:
        print(report.comparison_table(rows, failed, model, w, args.target_rate))
    return 0


def _gpus(args, plan: dict) -> int:
    """GPUs a compared card's deployment takes: --target-rate's, else the fixed layout's or --gpus' (8)."""
    if plan["sized"]:
        return plan["sized"].gpus
    return args.gpus or (plan["best"].layout.gpus if plan["fixed"] else 8)


def _order(plan: dict, args) -> tuple:
    """Compared cards: with --target-rate the cheapest an hour (or the fewest GPUs), else the cheapest a million
    tokens (or the most goodput a GPU)."""
    row, price = plan["rows"][0], plan["gpu_price"]
    if plan["sized"]:
        gpus = plan["sized"].gpus
        return (gpus * price if price else gpus, -row["goodput_tokens_per_s_per_gpu"])
    cost = row.get("usd_per_million_tokens")
    return (cost if cost is not None else math.inf, -row["goodput_tokens_per_s_per_gpu"])


def _prices(text: str | None, cards: int) -> list:
    """--gpu-price: one price for every card, or one a card, each in (0, MAX_GPU_PRICE] dollars a GPU-hour."""
    if text is None:
        return [None] * cards
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"--gpu-price {text}: expected dollars a GPU-hour (3.5), or one a --hardware card "
                             "(3.5,6)") from None
        if not (math.isfinite(value) and 0 < value <= MAX_GPU_PRICE):
            raise ValueError(f"--gpu-price {value:g} is out of range: (0, {MAX_GPU_PRICE:g}]")
        values.append(value)
    if len(values) not in (1, cards):
        raise ValueError(f"--gpu-price gives {len(values)} prices for {cards} --hardware cards: one, or one a card")
    return values * cards if len(values) == 1 else values


def _plan(args, gpu_price: float | None) -> dict:
    """Everything configure works out for one card, before anything is written or printed."""
    model, hw = load_model(args.model), load_hardware(args.hardware)
    if args.engine and args.engine not in engines_for(hw.card_class):  # only the ROCm-only engines are left out
        amd = [p for p in known_profiles() if load_hardware(p).card_class in ROCM_CARD_CLASSES]
        raise ValueError(f"--engine {args.engine}: {ENGINE_NAMES[args.engine]} runs on AMD Instinct GPUs (ROCm) only, "
                         f"and {hw.name} is not one (--hardware {' or '.join(amd)})")
    if args.gemm_min_tile:
        hw = replace(hw, gemm_min_tile_rows=args.gemm_min_tile, gemm_tile_rows=max(hw.gemm_tile_rows, args.gemm_min_tile))
    prec, ckpt, served = _precision(args, hw, model, read_checkpoint(args.model, model))
    pred = Predictor(model, hw, prec, DEFAULT)
    prec = pred.prec  # as the card runs it (Precision.on_card): what the plan is costed in, so the report says it
    w = Workload(args.isl, args.osl, args.cache_hit, args.isl_cv, args.ttft_slo_ms, args.tpot_slo_ms)
    if args.tbo and args.sbo:
        raise ValueError("--tbo and --sbo are two ways of overlapping the same communication: give one")
    prefill_mode = args.colocated_prefill or (ENGINE_PREFILL[args.engine] if args.engine else "mixed")
    head = load_head(args.draft_model, model) if args.draft_model else None
    o = Options(mtp_accept=args.mtp_accept, mtp_draft=args.mtp_draft, tbo=args.tbo, cuda_graphs=not args.no_cuda_graphs,
                memory_fraction=args.memory_fraction, sbo=args.sbo, prefill=prefill_mode, draft_head=head)
    balance = _balance(args, model)
    # a layout axis or a batch fixes one layout; --phase alone ranks the layouts of that phase over --gpus
    fixed = args.tp or args.ep or args.batch or args.moe_tp or args.redundant != "auto"
    notes = [f"formats: {prec.describe()}" + (" (what moeserve serve runs)" if args.emit else "")]
    drafting = pred.draft_head(o)
    notes += [f"drafts: {drafting.describe()}"] if drafting else []
    notes += [n for n in (ckpt.note(prec), ckpt.kv_note()) if n] if ckpt else []
    if args.engine and not args.colocated_prefill:
        notes.append(f"colocated prefill: {prefill_mode}, {ENGINE_NAMES[args.engine]}'s default scheduler "
                     "(--colocated-prefill sets another)")
    sized = None
    if fixed:
        result, note = _fixed(args, pred, w, o, balance)
        results = [result]
        notes += [note] if note else []
        if args.target_rate:
            sized = sizing.instances(result, args.target_rate, w)
            if args.gpus and sized.gpus > args.gpus:
                raise ValueError(f"--target-rate {args.target_rate:g} needs {sized.instances} instances of the layout, "
                                 f"{sized.gpus} GPUs: more than --gpus {args.gpus}")
    else:
        pp = _stages(args, model)
        gpus = args.gpus or 8
        if gpus % pp:
            raise ValueError(f"--gpus {gpus} is not a multiple of --pp {pp}")

        def ranked(n: int, top: int = args.top) -> list:
            return planner.rank(pred, n, w, o, balance, top, offload_prefill=args.offload_weights, pp=pp,
                                phase=args.phase)
        if args.target_rate:
            sized, _ = sizing.fewest_gpus(lambda n: next(iter(ranked(n, 1)), None), args.target_rate, w,
                                          hw.gpus_per_node, args.gpus or planner.MAX_GPUS, pp)
            gpus = sized.planned
        results = ranked(gpus)
        if not results:
            what = f"no {args.phase} layout" if args.phase else "nothing"
            raise ValueError(f"{what} fits: {model.name} on {gpus} x {hw.name}; add GPUs, use smaller formats"
                             + ("" if args.offload_weights or args.phase in ("decode", "colocated")
                                else " or --offload-weights for prefill"))
        if (w.ttft_slo_ms or w.tpot_slo_ms) and not any(r.meets(w) for r in results):
            speed = "input" if args.phase == "prefill" else "output"
            notes.append(f"no deployment here meets the SLOs (goodput 0): ranked by {speed} tokens/s; add GPUs, relax "
                         "the SLOs or use smaller formats")
    rows = [report.row(r, w, balance, gpu_price) for r in results]
    best = results[0]
    if sized:
        notes.append(sized.describe(w, gpu_price))
    past = track_record.record(hw.card_class, "prefill" if best.phase == "prefill" else "decode", best.batch,
                               ENGINE_NAMES.get(args.engine))
    replay = _replay(args, pred, best, w, o, balance) if args.num_prompts else None
    if replay:
        notes.append(replay[1])
        replay = replay if replay[0] else None
    return dict(model=model, hw=hw, w=w, o=o, prec=prec, ckpt=ckpt, served=served, notes=notes, rows=rows, best=best,
                drafting=drafting,
                fixed=fixed, past=past, replay=replay, sized=sized, gpu_price=gpu_price)


def _show(args, plan: dict) -> int:
    """Write --emit's files and print the plan (the table, or --json)."""
    model, hw, w, o, prec, ckpt = plan["model"], plan["hw"], plan["w"], plan["o"], plan["prec"], plan["ckpt"]
    notes, rows, past, replay, sized, fixed = (plan[k] for k in ("notes", "rows", "past", "replay", "sized", "fixed"))
    written = []
    if args.emit:
        from moeserve.capacity.emit import emit_files

        written = emit_files(args.emit, args.model, plan["best"], w, hw, plan["served"], model, args.plan,
                             o.draft_tokens, eagle=plan["drafting"] is not None)
    if args.json:
        out = {"model": model.name, "hardware": hw.name, "workload": vars(w) | {}, "efficiency": vars(DEFAULT),
               "precision": report.precision_fields(prec), "checkpoint": ckpt.as_dict(prec) if ckpt else None,
               "notes": notes, "emitted": [path for path, _ in written],
               "track_record": past.as_dict() if past else None, "run": replay[0].as_dict() if replay else None,
               "sizing": sized.as_dict() if sized else None}
        out.update(rows[0] if fixed else {"deployments": rows, **rows[0]})
        print(json.dumps(out, indent=2, default=float))
    else:
        print(report.table(rows, model, hw, w, notes) + (f"\n{past.describe()}" if past else ""))
    for path, what in written:
        print(f"wrote {path}: {what}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _replay(args, pred: Predictor, best: Prediction, w: Workload, o: Options, balance) -> tuple:
    """(RunResult, a line saying it) for a benchmark run of --num-prompts on the first row; (None, why not) for a
    prefill or P/D one (a run needs one deployment that prefills and decodes)."""
    if best.phase not in ("colocated", "decode"):
        return None, (f"--num-prompts: the first row is a {best.phase} deployment; a run is replayed on one that "
                      "prefills and decodes (--phase colocated)")
    o = replace(o, balancedness=balance(best.layout), offload=False)
    r = bench_run.simulate(pred, best.layout, w, o, args.num_prompts, args.length_dist, args.request_rate,
                           args.max_num_seqs, max_concurrency=args.max_concurrency)
    sent = f"at {args.request_rate:g} a second" if args.request_rate else "at once"
    if args.max_concurrency:
        sent += f", at most {args.max_concurrency} in flight"
    return r, (f"a run of {r.prompts} prompts sent {sent} ({args.length_dist} lengths, at most {args.max_num_seqs} "
               f"sequences a scheduler) on the first row: {r.seconds:.1f} s, {r.output_tokens_per_s_per_gpu:,.1f} output "
               f"tok/s a GPU (the steady state above: {best.output_tokens_per_s_per_gpu:,.1f}), mean TPOT "
               f"{r.mean_tpot_ms:.1f} ms, mean TTFT {r.mean_ttft_ms:,.0f} ms, at most {r.peak_running} decoding")


def _stages(args, model) -> int:
    """--pp (default 1), at most one stage a decoder layer."""
    pp = args.pp or 1
    if pp > model.num_layers:
        raise ValueError(f"--pp {pp} is more stages than {model.name}'s {model.num_layers} layers")
    return pp


def _fixed(args, pred: Predictor, w: Workload, o: Options, balance) -> tuple[Prediction, str]:
    tp, ep = args.tp or 1, args.ep or 1
    if pred.model.num_heads % tp:  # no engine splits a head (moeserve serve, vLLM and SGLang refuse it)
        raise ValueError(f"--tp {tp} does not divide {pred.model.name}'s {pred.model.num_heads} attention heads")
    experts, note = pred.model.num_experts, ""
    redundant = args.redundant
    if redundant == "auto":
        redundant = fill_redundant(experts, ep)
        if redundant:
            note = (f"--redundant auto: {redundant} redundant experts, so {experts} experts + {redundant} split evenly "
                    f"over --ep {ep} ({(experts + redundant) // ep} slots per rank)")
    lay = Layout(tp, ep, redundant, args.moe_tp or 0, _stages(args, pred.model)).validate(experts)
    if args.gpus and args.gpus % lay.gpus:
        raise ValueError(f"--gpus {args.gpus} is not a multiple of the layout's {lay.gpus} ranks"
                         + (f" ({lay.world} a stage x --pp {lay.pp})" if lay.pp > 1 else ""))
    o = replace(o, balancedness=balance(lay), offload=args.offload_weights)
    phase = args.phase or "colocated"
    if phase == "prefill":
        if args.batch:
            return pred.prefill(lay, args.batch, w, o), note
        best = planner.best_prefill(pred, lay, w, o)
        return best or pred.prefill(lay, planner.PREFILL_BATCHES[0], w, o), note
    run = pred.decode if phase == "decode" else pred.colocated
    if args.batch:
        return run(lay, args.batch, w, o), note
    best = planner.best_batch(lambda b: run(lay, b, w, o), planner.decode_batches(lay), w)
    return best or run(lay, planner.decode_batches(lay)[0], w, o), note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="moeserve configure")
    add_arguments(parser)
    return run(parser.parse_args(argv))
