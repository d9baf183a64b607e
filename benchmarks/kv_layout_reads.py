"""What a head slice costs a KV read: one decode rank's NIXL READ of a prompt's blocks when the prefill
side has the same --tp (whole blocks), --tp 1 against a --tp 2 decoder (half of each slot), and --tp 2
against a --tp 1 decoder (two source ranks), each as the engine reads (rank_agent: staged when the
head ranges differ) and as exact per-slot rows (cache_layout.pull_rows), against a plain torch copy.

    UCX_NET_DEVICES=lo python benchmarks/kv_layout_reads.py [--blocks 94] [--reps 20] [--json]

Caches shaped as the built-in model's (4 layers x K/V, [blocks, 16 slots, 4 KV heads, 32] float32);
the blocks named are a random permutation (a busy pool's), so whole blocks do not merge further. All
agents live in this process (UCX over loopback and shared memory); reported per case: descriptor
rows, bytes, median seconds of one read, GB/s.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from moeserve.kv_transfer.cache_layout import pull_rows  # noqa: E402
from moeserve.kv_transfer.head_slices import HeadRange  # noqa: E402
from moeserve.kv_transfer.nixl_agent import KvAgent  # noqa: E402
from moeserve.kv_transfer.rank_agent import RankKvAgent  # noqa: E402
from moeserve.kv_transfer.staging import plan_sources  # noqa: E402
from moeserve.kv_transfer.trust import PoolKey  # noqa: E402

KEY = PoolKey.from_secret("this benchmark's pool secret", "benchmark")  # no side channel is called here

LAYERS, SLOTS, HEADS, DIM = 4, 16, 4, 32


def agents(tp: int, pool: int) -> list[RankKvAgent]:
    out = []
    for r in range(tp):
        heads = HeadRange(r * HEADS // tp, HEADS // tp, HEADS)
        caches = [[torch.randn(pool, SLOTS, heads.count, DIM) for _ in range(2)] for _ in range(LAYERS)]
        out.append(RankKvAgent(caches, KEY, SLOTS, heads, 0, r))
    return out


def timed(read, reps: int) -> tuple[int, float]:
    times, nbytes = [], 0
    for _ in range(reps):
        started = time.perf_counter()
        nbytes = read()
        times.append(time.perf_counter() - started)
    return nbytes, statistics.median(times)


def timed_read(reader: RankKvAgent, sources: list[RankKvAgent], local: list[int], remote: list[int], reps: int,
               exact: bool) -> dict:
    """The engine's read (exact False) or the per-slot reference rows (exact True)."""
    agent: KvAgent = reader.agent
    layouts = [s.agent.layout for s in sources]
    for layout in layouts:
        agent.add_peer(layout)
    if exact:
        reads = pull_rows(agent.layout, layouts, local, remote)
        rows = sum(len(lo) for lo, _ in reads.values())
        nbytes, seconds = timed(lambda: sum(agent.read(n, lo, re, 30.0) for n, (lo, re) in reads.items()), reps)
    else:
        plan = plan_sources(agent.layout, layouts, remote)
        rows = len(layouts) * len(local) * 2 * LAYERS  # one per block and tensor, staged or in place
        nbytes, seconds = timed(lambda: sum(reader.read_from(p, local, remote, time.monotonic() + 30) for p in plan),
                                reps)
    return {"rows": rows, "bytes": nbytes, "seconds": seconds, "gb_s": nbytes / seconds / 1e9}


def timed_copy(nbytes: int, reps: int) -> dict:
    src, dst = torch.randn(nbytes // 4), torch.empty(nbytes // 4)
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - started)
    seconds = statistics.median(times)
    return {"rows": 1, "bytes": nbytes, "seconds": seconds, "gb_s": nbytes / seconds / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=94, help="blocks read (94: a 1500-token prompt)")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("UCX_NET_DEVICES", "lo")
    torch.set_num_threads(1)
    pool = args.blocks + 8
    gen = torch.Generator().manual_seed(0)
    remote = torch.randperm(pool, generator=gen)[: args.blocks].tolist()
    local = torch.randperm(pool, generator=gen)[: args.blocks].tolist()
    tp1, tp2 = agents(1, pool), agents(2, pool)
    readers = {"tp1": agents(1, pool)[0], "tp2": agents(2, pool)[0]}
    results = {
        "tp1 -> tp1 (whole blocks in place)": timed_read(readers["tp1"], tp1, local, remote, args.reps, False),
        "tp1 -> tp2, one rank: staged": timed_read(readers["tp2"], tp1, local, remote, args.reps, False),
        "tp1 -> tp2, one rank: per-slot rows": timed_read(readers["tp2"], tp1, local, remote, args.reps, True),
        "tp2 -> tp1: staged": timed_read(readers["tp1"], tp2, local, remote, args.reps, False),
        "tp2 -> tp1: per-slot rows": timed_read(readers["tp1"], tp2, local, remote, args.reps, True),
    }
    results["torch copy of the tp1 bytes"] = timed_copy(results["tp1 -> tp1 (whole blocks in place)"]["bytes"], args.reps)
    if args.json:
        print(json.dumps(results))
    else:
        print(f"{'case':44} {'rows':>7} {'MB':>7} {'ms':>8} {'GB/s':>6}")
        for name, r in results.items():
            print(f"{name:44} {r['rows']:7d} {r['bytes'] / 1e6:7.2f} {r['seconds'] * 1e3:8.2f} {r['gb_s']:6.2f}")
    for agent in [*tp1, *tp2, *readers.values()]:
        agent.close()
    sys.stdout.flush()
    os._exit(0)  # NIXL may crash at interpreter exit


if __name__ == "__main__":
    main()
