"""Wall time of dispatch + combine per MoE layer call, one-sided `shm` against gloo's `a2a` and `agrs`,
on real ranks.

It measures how much the one-sided backend saves over the faster gloo backend (and, across hosts,
where `auto`'s a2a/agrs crossover `tiny_tokens` lies: moeserve/dispatch/registry.py). Each rank routes
`tokens` random tokens (none on the last `--idle-ranks`: an idle attention group) to `experts` experts
(top-k), then runs dispatch and combine with no expert compute in between (the expert output is the
dispatched rows themselves: for shm's C++ path they lie in its heap, where its experts would write
theirs, so combine reads them in place as it would read the experts' output), `--iters` times per
backend, the backends interleaved in rounds so that load changes on a shared machine hit both alike,
each round in a shuffled order (whichever backend comes right after gloo's large collectives runs
slower: with a fixed order that was always shm, by 1-2 ms a call at ep 8 on two cores). Every rank
reports its median; the slowest rank's median is the layer's time (the collectives make every rank
wait for the slowest). With `--layers L` each sample is L calls back to back, divided by L:
consecutive MoE layers of one step, where every rank enters a layer as its previous combine returns,
instead of one call right after a barrier (whose ranks leave the barrier at different times: on more
ranks than cores the stagger is most of a call).
Not run by CI; numbers go to docs/dispatch.md.

    python benchmarks/dispatch_latency.py --ep 2 4 8 --tokens 1 4 16 64 256 --hidden 256 4096
    python benchmarks/dispatch_latency.py --ep 2 4 --wait futex yield spin   # shm's wait strategies side by side
    python benchmarks/dispatch_latency.py --layers 8   # per-layer latency of 8 layers back to back
    python benchmarks/dispatch_latency.py --ep 8 --idle-ranks 4   # half the ranks with no tokens
    python benchmarks/dispatch_latency.py --unplaced   # shm's placed calls against the same without them
    python benchmarks/dispatch_latency.py --partials   # shm's combine reading in place against sending partial rows
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import random
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from moeserve.dispatch import StepBounds, flag_wait, make_dispatcher, onesided
from moeserve.parallel_state import ParallelContext

GLOO = ("a2a", "agrs")


def _shm_columns(args: argparse.Namespace) -> dict[str, tuple[str, int | None, bool]]:
    """shm once per --wait strategy (shm, shm-yield, ...: the first is plain shm), with --unplaced once
    more with no placed calls, with --partials once more whose combine sends partial rows instead of
    reading the expert output in place: name -> (wait strategy, placed_bytes (None: the default),
    read_in_place)."""
    columns = {"shm" if i == 0 else f"shm-{w}": (w, None, True) for i, w in enumerate(args.wait)}
    if args.unplaced:
        columns["shm-unplaced"] = (args.wait[0], onesided.NEVER, True)
    if args.partials:
        columns["shm-partials"] = (args.wait[0], None, False)
    return columns


def _names(args: argparse.Namespace) -> list[str]:
    """a2a, agrs, then the shm columns."""
    return [*GLOO, *_shm_columns(args)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, args: argparse.Namespace, port: int, out: "mp.Queue") -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    ctx = ParallelContext(ep_size=args.world, ep_rank=rank, ep_group=dist.group.WORLD)
    bounds = StepBounds(max_tokens=max(args.tokens))  # the heap is sized once, as the engine does
    names = _names(args)
    backends = {name: make_dispatcher(name.split("-")[0], args.experts, ctx, bounds) for name in names}
    columns = _shm_columns(args)
    for name, (_, placed_bytes, read_in_place) in columns.items():
        if placed_bytes is not None:
            backends[name].placed_bytes = placed_bytes
        backends[name].read_in_place = read_in_place
    gen = torch.Generator().manual_seed(rank)
    results = []
    for hidden in args.hidden:
        for bound in args.tokens:
            tokens = bound
            if rank >= args.world - args.idle_ranks:  # an idle attention group: no tokens, same bound
                tokens = 0
            x = torch.randn(tokens, hidden, generator=gen)
            ids = torch.rand(tokens, args.experts, generator=gen).argsort(dim=1)[:, : args.top_k]  # distinct experts
            w = torch.rand(tokens, args.top_k, generator=gen)
            times: dict[str, list[float]] = {name: [] for name in names}
            cpu: dict[str, list[float]] = {name: [] for name in names}
            for it in range(args.warmup + args.iters):
                # each round in its own order (seeded by the round: the same on every rank), so every
                # backend follows every other about equally often: a call right after gloo's large
                # collectives runs slower, whichever backend it is
                order = list(names)
                random.Random(it).shuffle(order)
                for name in order:
                    backend = backends[name]
                    flag_wait.STRATEGY = columns[name][0] if name in columns else flag_wait.STRATEGY
                    dist.barrier()
                    t, c = time.perf_counter(), time.process_time()
                    for _ in range(args.layers):
                        batch, handle = backend.dispatch(x, ids, w, max_tokens=bound)
                        backend.combine(batch.hidden, handle)
                    if it >= args.warmup:
                        times[name].append((time.perf_counter() - t) / args.layers)
                        cpu[name].append((time.process_time() - c) / args.layers)
            results.append({"hidden": hidden, "tokens": bound,
                            **{name: statistics.median(v) * 1e3 for name, v in times.items()},
                            **{name + "_cpu": statistics.median(v) * 1e3 for name, v in cpu.items()}})
    out.put((rank, results))
    dist.destroy_process_group()


def run(args: argparse.Namespace) -> list[dict]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, args, port, out)) for r in range(args.world)]
    for p in procs:
        p.start()
    per_rank: dict[int, list[dict]] = {}
    deadline = time.monotonic() + args.timeout_s
    while len(per_rank) < len(procs):  # a rank that dies fails the run instead of leaving it waiting
        try:
            rank, results = out.get(timeout=1.0)
            per_rank[rank] = results
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                raise SystemExit(f"a rank failed (exit codes {dead}) or the run passed --timeout-s")
    for p in procs:
        p.join(timeout=30)
    rows = []
    for i, row in enumerate(per_rank[0]):
        merged = {"ep": args.world, "hidden": row["hidden"], "tokens": row["tokens"]}
        for name in _names(args):
            merged[name + "_ms"] = round(max(per_rank[r][i][name] for r in per_rank), 3)
            # CPU time of the process (all its threads, gloo's included), summed over ranks: what a
            # call costs when nothing else competes for the cores (a loaded machine inflates wall time)
            merged[name + "_cpu_ms"] = round(sum(per_rank[r][i][name + "_cpu"] for r in per_rank), 3)
        merged["agrs_over_a2a"] = round(merged["agrs_ms"] / merged["a2a_ms"], 2)
        merged["gloo_over_shm"] = round(min(merged["a2a_ms"], merged["agrs_ms"]) / merged["shm_ms"], 1)
        merged["gloo_over_shm_cpu"] = round(min(merged["a2a_cpu_ms"], merged["agrs_cpu_ms"]) / merged["shm_cpu_ms"], 1)
        for name in _names(args)[len(GLOO) + 1:]:
            merged[f"gloo_over_{name}"] = round(min(merged["a2a_ms"], merged["agrs_ms"]) / merged[name + "_ms"], 1)
        rows.append(merged)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ep", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 4, 16, 64, 256],
                    help="tokens per rank per call (= the step's global bound: every rank has this many)")
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 4096])
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--layers", type=int, default=1,
                    help="calls back to back per timed sample (a model's consecutive MoE layers, each starting "
                         "when the last combine returned); 1: one call right after a barrier")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timeout-s", type=float, default=600)
    ap.add_argument("--wait", nargs="+", default=["yield-futex"], choices=["futex", "yield-futex", "yield", "spin"],
                    help="how shm waits for flags (flag_wait.STRATEGY); several: one shm column each")
    ap.add_argument("--unplaced", action="store_true",
                    help="one more shm column whose calls are never placed (every row through the blocks: "
                         "MOESERVE_SHM_PLACED_BYTES)")
    ap.add_argument("--partials", action="store_true",
                    help="one more shm column whose combine sends each source partial rows instead of "
                         "letting it read the expert output in place")
    ap.add_argument("--idle-ranks", type=int, default=0,
                    help="the last N ranks hold no tokens (an idle attention group; the others as --tokens)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for world in args.ep:
        args.world = world
        rows += run(args)
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{'ep':>3} {'hidden':>6} {'tokens':>6} {'a2a ms':>8} {'agrs ms':>8} {'shm ms':>8} {'agrs/a2a':>8} "
          f"{'best gloo/shm':>13} {'cpu ms a2a/agrs/shm':>22} {'cpu best gloo/shm':>17}")
    for r in rows:
        cpu = f"{r['a2a_cpu_ms']:.2f}/{r['agrs_cpu_ms']:.2f}/{r['shm_cpu_ms']:.2f}"
        more = "".join(f"  {n}: {r[n + '_ms']:.3f} ms, best gloo/{n} {r['gloo_over_' + n]:.1f}"
                       for n in _names(args)[len(GLOO) + 1:])
        print(f"{r['ep']:>3} {r['hidden']:>6} {r['tokens']:>6} {r['a2a_ms']:>8.3f} {r['agrs_ms']:>8.3f} "
              f"{r['shm_ms']:>8.3f} {r['agrs_over_a2a']:>8.2f} {r['gloo_over_shm']:>13.1f} {cpu:>22} "
              f"{r['gloo_over_shm_cpu']:>17.1f}{more}")


if __name__ == "__main__":
    main()
