"""`moeserve configure`: plan a deployment, or predict a fixed one, from the model's config.json,
a hardware profile and the workload (docs/capacity.md)."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from moeserve.capacity.balance import ASSUMED_PLAIN, ASSUMED_REPLICATED, assumed_balancedness
from moeserve.capacity.efficiency import DEFAULT
from moeserve.capacity.hardware import known_profiles, load_hardware
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.model_spec import ModelSpec, load_model, shipped_models
from moeserve.capacity import planner
from moeserve.capacity.predict import Options, Prediction, Predictor, Workload

DTYPES = ("fp4", "fp8", "bf16", "fp16", "fp32")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help=f"checkpoint directory, config.json, or a shipped name ({', '.join(shipped_models())}); "
                   "default: the built-in tiny MoE")
    p.add_argument("--hardware", help=f"profile name ({', '.join(known_profiles())}) or a profile YAML file")
    p.add_argument("--gpus", type=int, help="GPUs (ranks) to plan for (default: the fixed layout's world, else 8)")
    p.add_argument("--isl", type=int, default=1024, help="input tokens per request (default 1024)")
    p.add_argument("--osl", type=int, default=256, help="output tokens per request (default 256)")
    p.add_argument("--cache-hit", type=float, default=0.0, help="share of input tokens found in the prefix cache (default 0)")
    p.add_argument("--isl-cv", type=float, default=0.0, help="spread of prompt lengths, std / mean (default 0: all --isl long)")
    p.add_argument("--ttft-slo-ms", type=float, help="time-to-first-token objective")
    p.add_argument("--tpot-slo-ms", type=float, help="time-per-output-token objective")
    p.add_argument("--trace", nargs="+", metavar="FILE", help="routing traces: expert balancedness from them (moeserve place --eval)")
    p.add_argument("--plan", metavar="PLAN.json", help="placement plan scored on --trace (default: contiguous experts)")
    p.add_argument("--balancedness", type=float, help=f"expert balancedness mean/max to assume without traces (default {ASSUMED_PLAIN} at ep > 1 without "
                   f"redundant experts, {ASSUMED_REPLICATED} with one or more per rank)")
    p.add_argument("--phase", choices=("prefill", "decode", "colocated"), help="predict this fixed layout instead of ranking")
    p.add_argument("--tp", type=int, help="fixed layout: tensor-parallel degree")
    p.add_argument("--ep", type=int, help="fixed layout: expert-parallel degree")
    p.add_argument("--redundant", type=int, default=0, help="fixed layout: redundant expert slots over the EP ranks (default 0)")
    p.add_argument("--batch", type=float, help="fixed layout: decode sequences per GPU, or prefill tokens per GPU per step "
                   "(default: the best that fits and meets the SLOs)")
    p.add_argument("--mtp-accept", type=float, default=1.0, help="mean tokens per decode step with MTP (1 + accepted drafts; default 1: off)")
    p.add_argument("--tbo", action="store_true", help="two-batch overlap of communication with compute")
    p.add_argument("--no-cuda-graphs", action="store_true", help="eager kernel launches")
    p.add_argument("--weights", choices=DTYPES, help="weight format (default fp8 where the hardware has FP8, else fp32)")
    p.add_argument("--kv-dtype", choices=DTYPES, help="KV cache format (default bf16 on GPUs, fp32 on CPUs)")
    p.add_argument("--memory-fraction", type=float, default=0.9, help="share of device memory the engine may use (default 0.9)")
    p.add_argument("--top", type=int, default=10, help="rows of the ranked table (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--emit", metavar="serve.yaml", help="write the winner's `moeserve serve --config` file")
    p.add_argument("--calibrate", nargs="?", const="cpu-calibrated.yaml", metavar="OUT.yaml",
                   help="time this machine (about a minute) and write a CPU hardware profile (default cpu-calibrated.yaml)")


def _fail(msg: str) -> int:
    print(f"moeserve configure: error: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    if args.calibrate:
        from moeserve.capacity.calibrate import write_profile

        print(write_profile(args.calibrate))
        return 0
    try:
        return _run(args)
    except ValueError as e:
        return _fail(str(e))


def _precision(args, hw) -> Precision:
    gpu = bool(hw.tflops.get("fp8"))
    act = "bf16" if gpu else "fp32"
    return Precision(weights=args.weights or ("fp8" if gpu else "fp32"), kv=args.kv_dtype or act, activations=act)


def _balance(args, model: ModelSpec):
    cache: dict[tuple, float] = {}

    def balance(lay: Layout) -> float:
        if args.balancedness is not None:
            return args.balancedness
        if lay.ep == 1:
            return 1.0
        if not args.trace:
            return assumed_balancedness(lay.ep, lay.redundant)
        key = (lay.ep, lay.redundant)
        if key not in cache:
            from moeserve.capacity.balance import balancedness_from

            cache[key] = balancedness_from(args.trace, args.plan, lay.ep, lay.redundant)
        return cache[key]
    return balance


def _check(args) -> None:
    if args.isl < 1 or args.osl < 1:
        raise ValueError("--isl and --osl must be >= 1")
    if not 0 <= args.cache_hit < 1:
        raise ValueError(f"--cache-hit must be in [0, 1), got {args.cache_hit}")
    if args.mtp_accept < 1:
        raise ValueError(f"--mtp-accept is tokens per step, >= 1; got {args.mtp_accept}")
    if args.balancedness is not None and not 0 < args.balancedness <= 1:
        raise ValueError(f"--balancedness is mean/max load, in (0, 1]; got {args.balancedness}")
    if args.plan and not args.trace:
        raise ValueError("--plan is scored on routing traces: pass --trace too")
    if args.hardware is None:
        raise ValueError(f"pass --hardware ({', '.join(known_profiles())}, or a profile YAML)")


def _run(args) -> int:
    _check(args)
    model, hw = load_model(args.model), load_hardware(args.hardware)
    pred = Predictor(model, hw, _precision(args, hw), DEFAULT)
    w = Workload(args.isl, args.osl, args.cache_hit, args.isl_cv, args.ttft_slo_ms, args.tpot_slo_ms)
    o = Options(mtp_accept=args.mtp_accept, tbo=args.tbo, cuda_graphs=not args.no_cuda_graphs,
                memory_fraction=args.memory_fraction)
    balance = _balance(args, model)
    fixed = args.phase or args.tp or args.ep or args.batch
    if fixed:
        results = [_fixed(args, pred, w, o, balance)]
    else:
        results = planner.rank(pred, args.gpus or 8, w, o, balance, args.top)
        if not results:
            raise ValueError(f"nothing fits: {model.name} on {args.gpus or 8} x {hw.name}; add GPUs or use smaller formats")
    rows = [_row(r, w, balance) for r in results]
    if args.emit:
        _emit(args, results[0], w, hw, pred.prec, model)
    if args.json:
        out = {"model": model.name, "hardware": hw.name, "workload": vars(w) | {}, "efficiency": vars(DEFAULT)}
        out.update(rows[0] if fixed else {"deployments": rows, **rows[0]})
        print(json.dumps(out, indent=2, default=float))
    else:
        print(_table(rows, model, hw, w))
    return 0


def _fixed(args, pred: Predictor, w: Workload, o: Options, balance) -> Prediction:
    tp, ep = args.tp or 1, args.ep or 1
    lay = Layout(tp, ep, args.redundant).validate(pred.model.num_experts)
    if args.gpus and args.gpus % lay.world:
        raise ValueError(f"--gpus {args.gpus} is not a multiple of the layout's {lay.world} ranks")
    o = replace(o, balancedness=balance(lay))
    phase = args.phase or "colocated"
    if phase == "prefill":
        if args.batch:
            return pred.prefill(lay, args.batch, w, o)
        best = planner.best_prefill(pred, lay, w, o)
        return best or pred.prefill(lay, planner.PREFILL_BATCHES[0], w, o)
    run = pred.decode if phase == "decode" else pred.colocated
    if args.batch:
        return run(lay, args.batch, w, o)
    best = planner.best_batch(lambda b: run(lay, b, w, o), planner.DECODE_BATCHES, w)
    return best or run(lay, 1, w, o)


def _row(p: Prediction, w: Workload, balance) -> dict:
    lay = p.layout
    mem = p.memory.get("decode", p.memory)
    row = {
        "phase": p.phase, "tp": lay.tp, "ep": lay.ep, "attention_dp": lay.attention_groups, "redundant_experts": lay.redundant,
        "batch_per_gpu": p.batch, "balancedness": balance(lay),
        "ttft_ms": p.ttft_ms, "tpot_ms": p.tpot_ms, "step_ms": p.step_ms,
        "input_tokens_per_s_per_gpu": p.input_tokens_per_s_per_gpu, "output_tokens_per_s_per_gpu": p.output_tokens_per_s_per_gpu,
        "goodput_tokens_per_s_per_gpu": p.goodput(w), "meets_slo": p.meets(w),
        "memory_per_gpu_gb": mem.get("total_gb", 0.0), "memory": p.memory, "fits": p.fits, "breakdown_ms": p.breakdown_ms,
    }
    if p.phase == "disaggregated":
        pre = p.sides[0].layout
        row.update(prefill_gpus=p.prefill_gpus, decode_gpus=p.decode_gpus, pd_ratio=f"{p.prefill_gpus}:{p.decode_gpus}",
                   prefill={"tp": pre.tp, "ep": pre.ep, "redundant_experts": pre.redundant,
                            "batch_tokens_per_gpu": p.sides[0].batch, "ttft_ms": p.sides[0].ttft_ms})
    return row


def _table(rows: list[dict], model: ModelSpec, hw, w: Workload) -> str:
    head = (f"{model.name} on {hw.name}: isl {w.isl}, osl {w.osl}"
            + (f", TTFT <= {w.ttft_slo_ms:g} ms" if w.ttft_slo_ms else "") + (f", TPOT <= {w.tpot_slo_ms:g} ms" if w.tpot_slo_ms else ""))
    cols = ("#  deployment (decode)   tp  ep  dp  red  batch  TTFT ms  TPOT ms  in tok/s/GPU  out tok/s/GPU  goodput  "
            "GB/GPU (weights+kv+act+buf)")
    lines = [head, cols]
    for i, r in enumerate(rows, 1):
        mem = r["memory"].get("decode", r["memory"])
        kind = r["phase"]
        if kind == "disaggregated":
            kind = f"P/D {r['pd_ratio']} p:tp{r['prefill']['tp']}ep{r['prefill']['ep']}"
        fmt = lambda v: "-" if v is None else f"{v:8.1f}"  # noqa: E731
        lines.append(f"{i:<2} {kind:<22}{r['tp']:>3} {r['ep']:>3} {r['attention_dp']:>3} {r['redundant_experts']:>4} "
                     f"{r['batch_per_gpu']:>6g} {fmt(r['ttft_ms'])} {fmt(r['tpot_ms'])} {r['input_tokens_per_s_per_gpu']:>13.0f} "
                     f"{r['output_tokens_per_s_per_gpu']:>14.0f} {r['goodput_tokens_per_s_per_gpu']:>8.0f}  "
                     f"{mem['total_gb']:.1f} ({mem['weights_gb']:.1f}+{mem['kv_gb']:.1f}+{mem['activations_gb']:.1f}"
                     f"+{mem['dispatch_buffers_gb']:.1f}){'' if r['fits'] else '  DOES NOT FIT'}")
    return "\n".join(lines)


def _emit(args, best: Prediction, w: Workload, hw, prec: Precision, model: ModelSpec) -> None:
    from moeserve.capacity import emit

    source = args.model
    if source and Path(source).name == "config.json":
        source = str(Path(source).parent)
    dtype = "float32" if prec.activations == "fp32" else "bfloat16"
    header = [f"moeserve configure: {model.name} on {hw.name}, isl {w.isl}, osl {w.osl}",
              f"predicted: TTFT {best.ttft_ms or 0:.1f} ms, TPOT {best.tpot_ms or 0:.2f} ms, "
              f"{best.output_tokens_per_s_per_gpu:.0f} output tok/s per GPU (weights {prec.weights}, KV {prec.kv} assumed)"]
    placement = args.plan if args.plan and best.layout.ep > 1 else None
    if best.phase == "disaggregated":
        header.append(f"prefill/decode split {best.prefill_gpus}:{best.decode_gpus} GPUs: this file is the decode side; "
                      f"{Path(args.emit).stem}.prefill.yaml the prefill side")
    settings = emit.serve_settings(best.sides[1] if best.sides else best, w, source, hw.gpus_per_node, dtype, placement)
    emit.write(args.emit, settings, header)
    if best.sides:
        pre_settings = emit.serve_settings(best.sides[0], w, source, hw.gpus_per_node, dtype, placement)
        emit.write(str(Path(args.emit).with_name(Path(args.emit).stem + ".prefill.yaml")), pre_settings, header)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="moeserve configure")
    add_arguments(parser)
    return run(parser.parse_args(argv))
