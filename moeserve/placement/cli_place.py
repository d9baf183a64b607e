"""`moeserve place`: plan a placement from traces, or score a plan on traces (`--eval`)."""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from moeserve.cli_files import check_figure, check_output
from moeserve.placement import evaluate, policies
from moeserve.placement.optimizer import PlacementSpec
from moeserve.placement.plan import PlacementPlan
from moeserve.placement.importers import load_trace
from moeserve.placement.trace import Trace, merge_traces


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", nargs="+", required=True, help="trace files (moeserve .npz, SGLang counts JSON, per-token JSONL)")
    p.add_argument("--eval", metavar="PLAN", help="score this plan on the traces instead of planning")
    p.add_argument("--ep", type=int, help="number of ranks (GPUs) holding experts")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--redundant", type=int, default=0, help="extra slots for replicas of hot experts")
    p.add_argument("--groups", type=int, help="expert groups of group-limited routing (default: from the trace, else 1)")
    p.add_argument("--home-share", type=float, help="keep at least this share of each group's load on its home node "
                   "(1 = every group whole on one node; default: global placement)")
    p.add_argument("--merge", action="store_true", help="plan for the traces' summed counts (samples of one workload) "
                   "instead of for each trace as its own workload (the default: balanced on every one of them)")
    p.add_argument("--policy", default="robust", help=f"one of {', '.join(policies.POLICIES)}")
    p.add_argument("--current", metavar="PLAN", help="plan in force: reuse its slots, report experts moved")
    p.add_argument("-o", "--output", metavar="PLAN", help="where to write the new plan (JSON)")
    p.add_argument("--plot", metavar="PNG", help="per-GPU load before (current or contiguous) and after")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _fail(msg: str) -> int:
    print(f"moeserve place: error: {msg}", file=sys.stderr)
    return 2


def _check_flags(args: argparse.Namespace) -> None:
    """The flags alone, before any file is read: each mistake named by its flag."""
    for flag, value, low in (("--ep", args.ep, 1), ("--nodes", args.nodes, 1), ("--redundant", args.redundant, 0),
                             ("--groups", args.groups, 1)):
        if value is not None and value < low:
            raise ValueError(f"{flag} {value} is out of range: {low} or more")
    if args.ep and args.ep % args.nodes:
        raise ValueError(f"--ep {args.ep} ranks do not split evenly over --nodes {args.nodes}")
    if args.home_share is not None and not 0.0 <= args.home_share <= 1.0:  # NaN fails both
        raise ValueError(f"--home-share {args.home_share:g} is out of range: [0, 1]")
    for flag, path in (("--eval", args.eval), ("--current", args.current)):
        if path is not None and not path:
            raise ValueError(f"{flag} '': name a placement plan file")
    if args.eval is not None and args.output is not None:
        raise ValueError("-o/--output writes a new plan; --eval scores one and writes none: drop one of them")
    if args.eval is not None:
        planning = [flag for flag, given in (("--redundant", args.redundant), ("--home-share", args.home_share is not None),
                                             ("--merge", args.merge)) if given]
        if planning:
            raise ValueError(f"{', '.join(planning)} shape a new plan; --eval scores the one it is given: drop them")
    if args.output is not None:
        check_output("-o/--output", args.output, "plan.json")
    if args.plot is not None:
        check_figure("--plot", args.plot)


def run(args: argparse.Namespace) -> int:
    try:
        _check_flags(args)
        traces = [load_trace(path) for path in args.trace]
        shapes = {t.counts.shape[1:] for t in traces}
        if len(shapes) > 1:
            return _fail(f"traces disagree on [layers, experts]: {sorted(shapes)}")
        num_experts = traces[0].num_experts
        if args.groups is not None and (args.groups < 1 or num_experts % args.groups):
            return _fail(f"--groups {args.groups} does not split the traces' {num_experts} experts into equal groups")
        current = _load_plan(args.current) if args.current else None
        if current is not None and (current.num_layers, current.num_experts) != traces[0].counts.shape[1:]:
            return _fail(f"--current plan is [layers={current.num_layers}, experts={current.num_experts}], "
                         f"traces {traces[0].counts.shape[1:]}")
        if args.eval is not None:
            plan, runtime = _load_plan(args.eval), None
            # --nodes defaults to 1: only another count given is a contradiction
            for flag, given, held in (("--ep", args.ep, plan.num_ranks), ("--nodes", args.nodes, plan.num_nodes)):
                if given is not None and given != held and not (flag == "--nodes" and given == 1):
                    return _fail(f"{flag} {given}, but the plan {args.eval} is for {held}: --eval scores the plan as it is")
        else:
            plan, runtime = _plan(args, traces, current)
    except ValueError as e:  # TraceFormatError and PlanError: the file and the field, named
        return _fail(str(e))
    if (plan.num_layers, plan.num_experts) != traces[0].counts.shape[1:]:
        return _fail(f"plan is [layers={plan.num_layers}, experts={plan.num_experts}], traces {traces[0].counts.shape[1:]}")
    try:
        report = _report(plan, traces, current, runtime, args)
        if args.output is not None:
            plan.save(args.output)
            report["output"] = args.output
        if args.plot is not None:
            _plot(plan, traces, current, args.plot)
    except ValueError as e:  # e.g. a --current plan of another shape than the new one
        return _fail(str(e))
    except OSError as e:
        return _fail(f"cannot write {e.filename}: {e.strerror or e}")
    print(json.dumps(report, indent=2) if args.json else _format(report))
    return 0


def _load_plan(path: str) -> PlacementPlan:
    try:
        return PlacementPlan.load(path)
    except OSError as e:
        raise ValueError(f"cannot read placement plan {path}: {e.strerror or e}") from None


def _plan(args: argparse.Namespace, traces: list[Trace], current: PlacementPlan | None):
    if not args.ep:
        raise ValueError("--ep is required to plan (or pass --eval PLAN)")
    groups = args.groups or traces[0].meta.get("num_groups") or 1
    spec = PlacementSpec(args.ep, args.nodes, args.redundant, groups, args.home_share)
    merged = merge_traces(traces)
    scenarios = merged.loads[None] if args.merge else np.stack([t.loads for t in traces])  # [S, L, E]
    pairs = merged.tokens.coactivation(merged.num_layers, merged.num_experts) if merged.tokens is not None else None
    start = time.perf_counter()
    plan = policies.get_policy(args.policy)(scenarios, spec, pairs, current)
    runtime = time.perf_counter() - start
    layer_ids = traces[0].meta.get("layer_ids")
    plan = PlacementPlan.from_phy2log(plan.phy2log, plan.num_experts, plan.num_ranks, plan.num_nodes, layer_ids)
    return plan.validate(), runtime


def _report(plan: PlacementPlan, traces: list[Trace], current, runtime, args) -> dict:
    report = {
        "plan": {"ranks": plan.num_ranks, "nodes": plan.num_nodes, "layers": plan.num_layers,
                 "experts": plan.num_experts, "slots": plan.num_slots, "policy": None if args.eval else args.policy},
        "traces": {},
    }
    if runtime is not None:
        report["runtime_s"] = round(runtime, 3)
    if current is not None:
        report["experts_moved"] = evaluate.experts_moved(plan, current)
    if len(traces) > 1:
        traces = traces + [merge_traces(traces)]
    for t in traces:
        entry = evaluate.score(plan, t.loads, t.tokens).summary()
        groups = args.groups or t.meta.get("num_groups")
        if groups and groups > 1 and plan.num_nodes > 1:
            entry["group_home_share_min"] = float(evaluate.home_share(plan, t.loads, groups).min())
        report["traces"][t.name] = {k: round(float(v), 4) for k, v in entry.items()}
    return report


def _format(report: dict) -> str:
    p = report["plan"]
    lines = [f"plan: {p['ranks']} ranks, {p['nodes']} nodes, {p['layers']} layers, {p['experts']} experts, {p['slots']} slots"]
    for key in ("runtime_s", "experts_moved", "output"):
        if key in report:
            lines.append(f"{key}: {report[key]}")
    for name, s in report["traces"].items():
        lines.append(f"{name}:")
        lines.append("  balancedness mean {balancedness_mean:.4f}  p5 {balancedness_p5:.4f}  min {balancedness_min:.4f}  "
                     "node mean {node_balancedness_mean:.4f}".format(**s))
        extra = {k: v for k, v in s.items() if not k.startswith(("balancedness", "node_balancedness"))}
        if extra:
            lines.append("  " + "  ".join(f"{k} {v}" for k, v in extra.items()))
    return "\n".join(lines)


def _plot(plan: PlacementPlan, traces: list[Trace], current, path: str) -> None:
    from moeserve.placement import plot

    loads = merge_traces(traces).loads
    before = current
    if before is None:
        before = PlacementPlan.contiguous(plan.num_layers, plan.num_experts, plan.num_ranks, plan.num_nodes) \
            if plan.num_experts % plan.num_ranks == 0 else plan
    title = "before: " + ("current plan" if current is not None else "contiguous")
    plot.before_after(evaluate.rank_loads(before, loads), evaluate.rank_loads(plan, loads), path, title)
