"""`moeserve trace`: inspect routing traces (`show`) and convert them to the project's format (`convert`)."""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from moeserve.cli_files import check_figure, check_output
from moeserve.placement.importers import load_trace
from moeserve.placement.trace import Trace, TraceFormatError, save_trace


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="trace_command", required=True)
    show = sub.add_parser("show", help="skew per layer and hottest experts")
    show.add_argument("trace", help="trace file (moeserve .npz, SGLang counts JSON, per-token JSONL)")
    show.add_argument("--heatmap", metavar="PNG", help="write a layer x expert load heatmap")
    show.add_argument("--top", type=int, default=3, help="hottest experts listed per layer")
    show.add_argument("--json", action="store_true")
    conv = sub.add_parser("convert", help="write any supported trace as a moeserve .npz trace")
    conv.add_argument("trace")
    conv.add_argument("-o", "--output", required=True)
    conv.add_argument("--phase", choices=("prefill", "decode", "mixed"))
    conv.add_argument("--max-tokens", type=int, help="keep at most this many per-token records (evenly sampled)")


def summarize(trace: Trace, top: int = 3) -> dict:
    """Per-layer skew (max/mean expert load, coefficient of variation) and the hottest experts."""
    loads = trace.loads  # [L, E]
    mean = np.maximum(loads.mean(axis=1), 1e-12)
    layer_ids = trace.meta.get("layer_ids") or list(range(trace.num_layers))
    layers = []
    for l in range(trace.num_layers):
        hot = np.argsort(-loads[l], kind="stable")[:top]
        layers.append({
            "layer": int(layer_ids[l]),
            "tokens": float(loads[l].sum()),
            "max_over_mean": round(float(loads[l].max() / mean[l]), 3),
            "cv": round(float(loads[l].std() / mean[l]), 3),
            "hottest": [[int(e), round(float(loads[l, e] / loads[l].sum()), 4)] for e in hot],
        })
    meta_keys = ("model", "top_k", "num_groups", "phase", "source_format")
    out = {"name": trace.name, "windows": trace.num_windows, "layers": trace.num_layers,
           "experts": trace.num_experts, **{k: trace.meta.get(k) for k in meta_keys},
           "token_records": 0 if trace.tokens is None else len(trace.tokens.layer), "per_layer": layers}
    skew = np.array([x["max_over_mean"] for x in layers])
    out["max_over_mean"] = {"mean": round(float(skew.mean()), 3), "max": round(float(skew.max()), 3)}
    return out


def _format(s: dict) -> str:
    lines = [f"{s['name']}: {s['windows']} windows, {s['layers']} MoE layers, {s['experts']} experts, "
             f"top_k={s['top_k']}, groups={s['num_groups']}, phase={s['phase']}, token records={s['token_records']}",
             f"max/mean expert load: mean {s['max_over_mean']['mean']}, worst {s['max_over_mean']['max']}",
             f"{'layer':>5} {'max/mean':>8} {'cv':>6}  hottest (expert: share)"]
    for x in s["per_layer"]:
        hot = ", ".join(f"{e}: {share:.3f}" for e, share in x["hottest"])
        lines.append(f"{x['layer']:>5} {x['max_over_mean']:>8.3f} {x['cv']:>6.3f}  {hot}")
    return "\n".join(lines)


def _thin(trace: Trace, max_tokens: int | None) -> Trace:
    from dataclasses import replace

    from moeserve.placement.trace import TokenSample

    t = trace.tokens
    if t is None or max_tokens is None or len(t.layer) <= max_tokens:
        return trace
    keep = np.linspace(0, len(t.layer) - 1, max_tokens).astype(np.int64)
    return replace(trace, tokens=TokenSample(t.layer[keep], t.topk[keep], t.rank[keep], t.token_id[keep]))


def _fail(msg: str) -> int:
    print(f"moeserve trace: error: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    if args.trace_command == "show" and args.top < 0:
        return _fail(f"--top must be >= 0, got {args.top}")
    if args.trace_command == "convert" and args.max_tokens is not None and args.max_tokens < 1:
        return _fail(f"--max-tokens must be >= 1, got {args.max_tokens}")
    try:
        if args.trace_command == "convert":
            check_output("-o/--output", args.output, "trace.npz")
        elif args.heatmap is not None:
            check_figure("--heatmap", args.heatmap)
        trace = load_trace(args.trace)
    except ValueError as e:  # TraceFormatError: the file and the field, named; an unreadable file too
        return _fail(str(e))
    try:
        return _convert(trace, args) if args.trace_command == "convert" else _show(trace, args)
    except OSError as e:
        return _fail(f"cannot write {e.filename}: {e.strerror or e}")


def _convert(trace: Trace, args: argparse.Namespace) -> int:
    if args.phase:
        trace = trace.with_meta(phase=args.phase)
    save_trace(_thin(trace, args.max_tokens), args.output)
    print(f"wrote {args.output}: {trace.num_windows} windows x {trace.num_layers} layers x {trace.num_experts} experts")
    return 0


def _show(trace: Trace, args: argparse.Namespace) -> int:
    summary = summarize(trace, args.top)
    print(json.dumps(summary, indent=2) if args.json else _format(summary))
    if args.heatmap is not None:
        from moeserve.placement import plot

        plot.heatmap(trace.loads, args.heatmap, f"{trace.name}: load / layer mean", trace.meta.get("layer_ids"))
        print(f"heatmap: {args.heatmap}")
    return 0
