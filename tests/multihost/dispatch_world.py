"""One rank of the dispatch equality world on simulated hosts (test_hier_dispatch.py starts two per
host): 6 ranks, node-major on host-a (0, 1), host-b (2, 3) and host-c (4, 5); ep groups of 4 ranks
(two hosts) and 6 (three), each with its node and rail groups, made by every rank in one order. Runs
every case of CASES whose world holds this rank and prints one JSON line: {case name: None | error}.

    RANK=r WORLD_SIZE=6 MASTER_ADDR=... MASTER_PORT=... python dispatch_world.py
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# the host's half through nvshmem's Triton kernels, over the shared-memory heap (one case below)
os.environ.update(TRITON_INTERPRET="1", MOESERVE_NVSHMEM_EMULATE="1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from dispatch_cases import Case, check_rank, fake_expert, full_inputs, rank_slice  # noqa: E402

from moeserve.dispatch import make_dispatcher  # noqa: E402
from moeserve.dispatch.hierarchical import HierDispatcher  # noqa: E402
from moeserve.dispatch.heap import HeapError  # noqa: E402
from moeserve.parallel_state import ParallelContext  # noqa: E402

BF16 = torch.bfloat16
PER_HOST = 2


def cases() -> list[Case]:
    out = []
    for w in (4, 6):
        c = dict(ranks_per_host=PER_HOST)
        out += [
            Case(f"hier-w{w}-random", "hier", w, 2, 2, tuple(range(3, 3 + w)), seed=w, **c),
            Case(f"hier-w{w}-zero-ranks", "hier", w, 3, 3, (0,) + (7,) * (w - 2) + (0,), seed=10 + w, **c),
            Case(f"hier-w{w}-distinct", "hier", w, 2, 2, (5,) * w, routing="distinct", seed=20 + w, **c),
            Case(f"hier-w{w}-one-rank", "hier", w, 3, 2, (4,) * w, routing="one_rank", seed=30 + w, **c),
            Case(f"hier-w{w}-hot", "hier", w, 2, 2, (6,) * w, routing="hot", seed=40 + w, **c),
            Case(f"hier-w{w}-bf16", "hier", w, 2, 3, (5,) * w, dtype=BF16, id_dtype=torch.int32, seed=50 + w, **c),
            Case(f"hier-w{w}-bad-id", "hier", w, 2, 2, (3,) * w, bad_rank=w - 1, seed=60 + w, **c),
            Case(f"hier-w{w}-dropped-int32", "hier", w, 4, 4, (9, 0, 5, 2, 1, 6)[:w], routing="dropped",
                 id_dtype=torch.int32, **c),
            Case(f"hier-w{w}-hot-dup", "hier", w, 1, 3, (3, 4, 0, 2, 5, 1)[:w], routing="hot_dup", seed=1, **c),
            Case(f"hier-w{w}-all-empty", "hier", w, 2, 2, (0,) * w, seed=2, **c),
            Case(f"hier-w{w}-top1", "hier", w, 2, 1, (4, 1, 0, 6, 2, 3)[:w], seed=3, **c),
            Case(f"hier-w{w}-top4-wide", "hier", w, 4, 4, (8, 3, 6, 0, 5, 7)[:w], seed=4, **c),
            Case(f"hier-w{w}-no-max-tokens", "hier", w, 2, 2, (2, 5, 0, 3, 1, 4)[:w], pass_max_tokens=False, seed=12,
                 **c),
            Case(f"hier-w{w}-slack", "hier", w, 2, 2, (2, 5, 1, 3, 0, 2)[:w], max_tokens_slack=4, seed=13, **c),
            Case(f"hier-w{w}-too-many-tokens", "hier", w, 2, 2, (3,) * w, max_tokens_slack=-1, seed=14, **c),
            Case(f"hier-w{w}-wide-slots", "hier", w, 130, 2, (6, 3, 0, 5, 2, 4)[:w], seed=15, **c),  # int16 ids
            Case(f"hier-torch-w{w}-random", "hier-torch", w, 2, 3, tuple(range(2, 2 + w)), seed=16, **c),
            Case(f"hier-partials-w{w}-bf16", "hier-partials", w, 2, 3, (5,) * w, dtype=BF16, seed=17, **c),
            Case(f"hier-placed-w{w}-random", "hier-placed", w, 2, 2, tuple(range(3, 3 + w)), seed=18, **c),
            Case(f"auto-w{w}-picks-hier", "auto", w, 2, 2, (4, 0, 9, 2, 5, 1)[:w], seed=19, **c),
            # ids_valid as the MoE layer passes it; with a bad rank, only that rank does not vouch for its ids
            Case(f"hier-w{w}-ids-valid-bf16", "hier", w, 2, 3, (5, 0, 3, 6, 2, 4)[:w], dtype=BF16, ids_valid=True,
                 seed=21, **c),
            Case(f"hier-w{w}-ids-valid-bad-peer", "hier", w, 2, 2, (3,) * w, bad_rank=w - 1, ids_valid=True, seed=22,
                 **c),
        ]
    out.append(Case("hier-nvshmem-w4-random", "hier-nvshmem", 4, 2, 2, (3, 1, 0, 4), seed=20, ranks_per_host=PER_HOST))
    out.append(Case("shm-w4-across-hosts-refused", "shm", 4, 2, 2, (1,) * 4))
    return out


CASES = cases()


def run_case(case: Case, rank: int, groups: dict) -> str | None:
    ep_group, node_group, rail_group = groups[case.world]
    ctx = ParallelContext(ep_size=case.world, ep_rank=rank, ep_group=ep_group, node_size=PER_HOST,
                          node_group=node_group, rail_group=rail_group)
    hidden, ids, weights = full_inputs(case)
    sl = rank_slice(case, rank)
    if case.backend == "shm":  # one segment for ranks that share no /dev/shm: every rank must refuse it
        try:
            make_dispatcher("shm", case.num_slots, ctx).dispatch(hidden[sl], ids[sl], weights[sl], max(case.tokens))
        except HeapError:
            return None
        return "shm mapped one heap across hosts"
    opts = {"hier-torch": {"native": False}, "hier-nvshmem": {"inner": "nvshmem"}}.get(case.backend, {})
    disp = make_dispatcher("hier" if case.backend.startswith("hier") else case.backend, case.num_slots, ctx, **opts)
    if not isinstance(disp, HierDispatcher):
        return f"{case.backend} built {type(disp).__name__}, not the hierarchical dispatcher"
    if case.backend == "hier-partials":
        disp.inner.read_in_place = False
    if case.backend == "hier-placed":
        disp.inner.placed_bytes = 0
    ids = ids[sl].clone()
    if case.bad_rank == rank and ids.numel():
        ids[0, 0] = case.num_slots
    max_tokens = max(case.tokens) + case.max_tokens_slack if case.pass_max_tokens else None
    expect_error = case.bad_rank is not None or case.max_tokens_slack < 0
    try:
        batch, handle = disp.dispatch(hidden[sl], ids, weights[sl], max_tokens=max_tokens,
                                      ids_valid=case.ids_valid and rank != case.bad_rank)
    except ValueError as e:
        return None if expect_error else f"unexpected error: {e}"
    if expect_error:
        return "expected every rank to raise on bad routing"
    y, buffer = fake_expert(batch, rank * case.slots_per_rank), disp.expert_output(batch)
    out = disp.combine(y if buffer is None else buffer.copy_(y), handle)
    inner = disp.inner
    in_place = inner._native and inner.read_in_place and not inner._fused and bool((inner._terms[handle.inner.epoch % 2][:, 0] >= 0).all())
    flag = torch.tensor([int(in_place)])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=node_group)  # every rank of the host read in place
    label = "hier-in-place" if int(flag) else "hier"
    if case.backend == "hier-placed" and inner._native and inner.placed_calls != 1:
        return f"{inner.placed_calls} placed calls inside the host, expected 1"
    try:
        check_rank(case, rank, batch, out, label)
    except AssertionError as e:
        return f"{label}: {e}"
    disp.inner.close()
    return None


def main() -> None:
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    groups = {}
    for w in (4, 6):  # every rank makes every group, in this order
        ep = dist.group.WORLD if w == world else dist.new_group(list(range(w)))
        nodes = [dist.new_group(list(range(n * PER_HOST, (n + 1) * PER_HOST))) for n in range(w // PER_HOST)]
        rails = [dist.new_group(list(range(i, w, PER_HOST))) for i in range(PER_HOST)]
        if rank < w:
            groups[w] = (ep, nodes[rank // PER_HOST], rails[rank % PER_HOST])
    results = {}
    for case in CASES:
        if rank < case.world:
            if os.environ.get("DISPATCH_WORLD_TRACE"):
                print("case", case.name, flush=True)
            try:
                results[case.name] = run_case(case, rank, groups)
            except Exception as e:  # noqa: BLE001 - reported per case; the world goes on
                results[case.name] = f"{type(e).__name__}: {e}"
            if os.environ.get("DISPATCH_WORLD_TRACE") and results[case.name]:
                print("failed", case.name, results[case.name][:300], flush=True)
    print("RESULTS " + json.dumps(results), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
