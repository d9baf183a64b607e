"""Measure online-rebalance weight moves across CPU ranks on gloo (not run by CI):

    python benchmarks/rebalance_moves.py --ranks 4 --layers 4 --experts 32 --redundant 8 --hidden 1024 --inter 512

Each rank holds stand-in MoE layers (the attributes RankPlacement uses); one move = one random new
placement per layer (about every slot changes). Prints per-move seconds and bytes crossing ranks.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "placement_runtime"))  # random_plan


class StandIn:
    """What RankPlacement reads and writes on a MoELayer."""

    def __init__(self, phy2log, rank, ranks, hidden, inter):
        self.num_experts = max(phy2log) + 1
        self.phy2log, self.slots_per_rank = list(phy2log), len(phy2log) // ranks
        self.first_slot = rank * self.slots_per_rank
        self.on_route = None
        self.experts = type("E", (), {})()
        self.experts.w13 = torch.randn(self.slots_per_rank, 2 * inter, hidden)
        self.experts.w2 = torch.randn(self.slots_per_rank, hidden, inter)

    def remap(self, phy2log, slot_map):
        self.phy2log = list(phy2log)


def run(rank, args, port):
    from runtime_plans import random_plan

    from moeserve.engine.rebalance import RankPlacement
    from moeserve.parallel_state import ParallelContext

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks)
    slots = args.experts + args.redundant
    start = random_plan(0, args.layers, args.experts, slots, args.ranks)
    layers = [StandIn(row.tolist(), rank, args.ranks, args.hidden, args.inter) for row in start.phy2log]
    ctx = ParallelContext(ep_size=args.ranks, ep_rank=rank, ep_group=dist.group.WORLD)
    placement = RankPlacement(layers, ctx)
    for move in range(1, args.moves + 1):
        plan = random_plan(move, args.layers, args.experts, slots, args.ranks)
        dist.barrier()
        t = time.perf_counter()
        placement.apply({"phy2log": plan.phy2log.tolist()})
        dist.barrier()
        if rank == 0:
            m = placement.last_move
            wall = time.perf_counter() - t
            print(f"move {move}: {wall:.3f} s, {m['bytes'] / 2**20:.1f} MiB across ranks, {m['slots']} slots, "
                  f"{m['bytes'] / 2**20 / wall:.0f} MiB/s")
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    for name, default in (("ranks", 4), ("layers", 4), ("experts", 32), ("redundant", 8), ("hidden", 1024),
                          ("inter", 512), ("moves", 3)):
        p.add_argument(f"--{name}", type=int, default=default)
    args = p.parse_args()
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(run, (args, port), nprocs=args.ranks)
