"""Placement benchmark: our optimizer vs an EPLB-style baseline on the third-party real traces
(traces/README.md: what they are, where they come from).

    python benchmarks/placement_bench.py [--traces DIR] [--only insample,locality,loo,mixtral,moves,runtime]

DIR holds deepseek_sglang_counts/ and mixtral_per_token/ (default: $MOESERVE_SHARED_TRACES).

Prints markdown tables (the numbers in docs/placement.md come from here). Not run by CI.
"""
from __future__ import annotations

import argparse
import glob
import os
import time

import numpy as np

from moeserve.placement.baselines import eplb_global, eplb_hierarchical
from moeserve.placement.evaluate import experts_moved, home_share, score
from moeserve.placement.optimizer import PlacementSpec, normalize, optimize
from moeserve.placement.plan import PlacementPlan
from moeserve.placement.importers import load_trace
from moeserve.placement.trace import merge_traces

G, N, R, K = 32, 4, 32, 8  # the reference setup: 32 GPUs, 4 nodes, 32 redundant slots, 8 groups


def _deepseek(root: str) -> dict[str, np.ndarray]:
    files = sorted(glob.glob(os.path.join(root, "deepseek_sglang_counts", "*.json")))
    return {os.path.basename(f)[:-5]: load_trace(f).loads for f in files}


def _bal(plan: PlacementPlan, loads: np.ndarray) -> float:
    return float(score(plan, loads).balancedness.mean())


def insample(ds: dict) -> None:
    print("\n## In-sample balancedness (32 GPUs, 4 nodes, 32 redundant)\n")
    print("| file | contiguous | EPLB hier. | EPLB global | ours | ours min layer |")
    print("|---|---|---|---|---|---|")
    contiguous = PlacementPlan.contiguous(58, 256, G, N)
    for name, loads in ds.items():
        ours = score(optimize(loads, PlacementSpec(G, N, R)), loads).balancedness
        row = [_bal(contiguous, loads), _bal(eplb_hierarchical(loads, G, N, R, K), loads), _bal(eplb_global(loads, G, N, R), loads)]
        print(f"| {name} | " + " | ".join(f"{v:.4f}" for v in row) + f" | {ours.mean():.4f} | {ours.min():.4f} |")


def locality(ds: dict) -> None:
    for g, n, r in ((32, 4, 32), (64, 8, 64)):
        print(f"\n## Group locality, {g} GPUs / {n} nodes / {r} redundant (mean over the 12 files)\n")
        print("| policy | GPU balancedness | node balancedness | min group home share |")
        print("|---|---|---|---|")
        rows = [("EPLB hierarchical", lambda L: eplb_hierarchical(L, g, n, r, K))]
        floors = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.2, 0.0) if n == 4 else (1.0, 0.8, 0.6, 0.4)
        rows += [(f"ours, home share >= {f}", lambda L, f=f: optimize(L, PlacementSpec(g, n, r, K, f))) for f in floors]
        rows += [("ours, global", lambda L: optimize(L, PlacementSpec(g, n, r))), ("EPLB global", lambda L: eplb_global(L, g, n, r))]
        for label, make in rows:
            vals = []
            for loads in ds.values():
                plan = make(loads)
                s = score(plan, loads)
                vals.append((s.balancedness.mean(), s.node_balancedness.mean(), home_share(plan, loads, K).min()))
            v = np.array(vals)
            print(f"| {label} | {v[:, 0].mean():.4f} | {v[:, 1].mean():.4f} | {v[:, 2].min():.3f} |")


def loo(ds: dict) -> None:
    print("\n## Leave-one-out (plan from the other 11 files, each normalized; scored on the one left out)\n")
    names = list(ds)
    x = normalize(np.stack([ds[k] for k in names]))  # [12, L, E]
    print("| held out | EPLB global | ours | ours, worst training file |")
    print("|---|---|---|---|")
    res = []
    for h, name in enumerate(names):
        train = np.delete(x, h, axis=0)
        base = _bal(eplb_global(train.sum(axis=0), G, N, R), x[h])
        plan = optimize(train, PlacementSpec(G, N, R))
        ours = _bal(plan, x[h])
        worst_train = min(_bal(plan, t) for t in train)
        res.append((base, ours, worst_train))
        print(f"| {name} | {base:.4f} | {ours:.4f} | {worst_train:.4f} |")
    r = np.array(res)
    print(f"| **mean** | {r[:, 0].mean():.4f} | {r[:, 1].mean():.4f} | {r[:, 2].mean():.4f} |")
    print(f"| **worst** | {r[:, 0].min():.4f} | {r[:, 1].min():.4f} | {r[:, 2].min():.4f} |")


def mixtral(root: str) -> None:
    print("\n## Mixtral per-token (all three files, 4 GPUs, 4 extra slots, fewest-GPU replica choice)\n")
    t = merge_traces([load_trace(f) for f in sorted(glob.glob(os.path.join(root, "mixtral_per_token", "*.jsonl")))])
    loads, pairs = t.loads, t.tokens.coactivation(t.num_layers, t.num_experts)
    print("| policy | balancedness | GPUs per token |")
    print("|---|---|---|")
    rows = [("contiguous", PlacementPlan.contiguous(t.num_layers, 8, 4)), ("EPLB global", eplb_global(loads, 4, 1, 4)),
            ("ours, no co-activation", optimize(loads, PlacementSpec(4, 1, 4)))]
    rows += [(f"ours + co-activation (slack {s})", optimize(loads, PlacementSpec(4, 1, 4, coactivation_slack=s), pairs=pairs))
             for s in (0.01, 0.02, 0.04)]
    for label, plan in rows:
        s = score(plan, loads, t.tokens)
        print(f"| {label} | {s.balancedness.mean():.4f} | {s.gpus_per_token:.3f} |")


def moves(ds: dict) -> None:
    print("\n## Experts moved relative to the plan in force (58 layers x 288 slots = 16704 slots)\n")
    names = list(ds)
    rng = np.random.default_rng(0)
    spec = PlacementSpec(G, N, R)
    print("| change in load | moved, fresh plan | moved, with --current | balancedness with --current | fresh |")
    print("|---|---|---|---|---|")
    a = ds[names[5]]
    current = optimize(a, spec)
    for label, new in (("none", a), ("+-2% noise", a * rng.uniform(0.98, 1.02, a.shape)),
                       ("+-10% noise", a * rng.uniform(0.9, 1.1, a.shape)), (f"other file ({names[6]})", ds[names[6]])):
        fresh, kept = optimize(new, spec), optimize(new, spec, current=current)
        print(f"| {label} | {experts_moved(fresh, current)} | {experts_moved(kept, current)} | {_bal(kept, new):.4f} | {_bal(fresh, new):.4f} |")


def runtime(ds: dict) -> None:
    print("\n## Runtime (58 layers x 256 experts, 32 GPUs, 4 nodes, 32 redundant; best of 3)\n")
    loads = next(iter(ds.values()))
    x11 = normalize(np.stack(list(ds.values())[:11]))
    print("| input | policy | wall s | CPU s |")
    print("|---|---|---|---|")
    for label, policy, fn in (
        ("1 trace", "EPLB global", lambda: eplb_global(loads, G, N, R)),
        ("1 trace", "ours", lambda: optimize(loads, PlacementSpec(G, N, R))),
        ("1 trace", "ours, home share >= 1", lambda: optimize(loads, PlacementSpec(G, N, R, K, 1.0))),
        ("11 traces", "ours", lambda: optimize(x11, PlacementSpec(G, N, R))),
    ):
        walls, cpus = [], []
        for _ in range(3):
            w, c = time.perf_counter(), time.process_time()
            fn()
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
        print(f"| {label} | {policy} | {min(walls):.2f} | {min(cpus):.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", default=os.environ.get("MOESERVE_SHARED_TRACES"),
                   help="folder of the third-party traces (default: $MOESERVE_SHARED_TRACES)")
    p.add_argument("--only", default="insample,locality,loo,mixtral,moves,runtime")
    args = p.parse_args()
    if not args.traces:
        p.error("give --traces DIR or set MOESERVE_SHARED_TRACES (traces/README.md)")
    only = set(args.only.split(","))
    ds = _deepseek(args.traces)
    for name, fn in (("insample", insample), ("locality", locality), ("loo", loo), ("moves", moves), ("runtime", runtime)):
        if name in only:
            fn(ds)
    if "mixtral" in only:
        mixtral(args.traces)


if __name__ == "__main__":
    main()
