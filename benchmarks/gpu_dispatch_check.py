"""The `nvshmem` dispatch backend on a GPU: its heap (nvshmem4py), its Triton put kernels compiled for the
card, and its protocol, checked bit for bit against `local` and timed. `benchmarks/gpu_check.py` runs it
as one of its steps; alone:

    python benchmarks/gpu_dispatch_check.py [--worlds 1 2] [--layer mixtral|deepseek] [--profile] [--dry-run]

Each world size spawns that many processes on GPU 0 (a gloo group for the set-up, NVSHMEM for the data):
world 1 checks the heap, the kernels and the flags against the rank's own region; world 2 on one GPU
needs NVSHMEM's several-processes-per-GPU support and reports whatever NVSHMEM says where it has none.
Every rank dispatches random routing (one hot expert, dropped ids included), a fake expert scales each
slot's rows, and combine's output and the ExpertBatch rows must equal `local`'s on the whole routing.
--dry-run runs the same over the shared-memory heap on the CPU with TRITON_INTERPRET=1
(MOESERVE_NVSHMEM_EMULATE=1): the harness, not the numbers. --profile adds rank 0's torch profiler
table of PROFILED calls (where the host's time goes: launches, copies, waits).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import sys
import time
import traceback
from pathlib import Path
from statistics import median
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# --layer: (expert slots per rank, top-k, hidden) of the timed layer; the checked cases use its slots
# and top-k at hidden 256 and at its hidden
LAYERS = {"mixtral": (8, 4, 4096), "deepseek": (32, 8, 7168)}  # DeepSeek-V3: 256 experts at ep 8, top-8
PROFILED = (16, 20)  # (tokens per rank, calls) of the --profile table, at the layer's hidden


def _use_layer(layer: str) -> None:
    """Sets the module's shape constants: here for the default, and in each spawned rank (which imports
    this module afresh) for the layer asked for."""
    global SLOTS_PER_RANK, TOP_K, HIDDEN, CASES, TIMED
    SLOTS_PER_RANK, TOP_K, HIDDEN = LAYERS[layer]
    # (tokens per rank, hidden); 512 tokens: put_kernels' large-batch path (past SCAN_BLOCKS token blocks)
    CASES = ((1, 256), (16, 256), (64, HIDDEN), (256, HIDDEN), (512, 256))
    TIMED = ((1, HIDDEN), (16, HIDDEN), (64, HIDDEN), (256, HIDDEN))


_use_layer("mixtral")


def _inputs(world: int, tokens: int, hidden: int, dtype, seed: int, routing: str, dev):
    """hidden [W*T, H], topk_ids [W*T, k], weights [W*T, k] for every rank's tokens, rank-major."""
    import torch

    g = torch.Generator().manual_seed(seed)
    n, slots = world * tokens, world * SLOTS_PER_RANK
    x = torch.randn(n, hidden, generator=g).to(dtype)
    w = torch.rand(n, TOP_K, generator=g).to(dtype)
    ids = torch.rand(n, slots, generator=g).topk(TOP_K, dim=1).indices
    if routing == "hot":
        ids[:, 0] = slots - 1
    elif routing == "dropped":
        ids[torch.rand(n, TOP_K, generator=g) < 0.3] = -1
    return x.to(dev), ids.to(dev), w.to(dev)


def _fake_expert(rows, counts, first_slot: int):
    """Each local slot's rows scaled by (1 + global slot / 8): a different, exact function per slot."""
    import torch

    scale = 1 + (first_slot + torch.arange(len(counts), device=rows.device)) / 8
    return rows * scale.repeat_interleave(counts.to(rows.device)).to(rows.dtype)[:, None]


def _combine_error(out, ref, ids, weights, x, world: int) -> tuple[bool, float]:
    """The one-sided combine's contract (docs/dispatch.md): bit for bit where no rank adds two terms of
    a token (the fp32 sum is not regrouped), else within fp32 rounding of the terms' magnitude.
    Returns (exact tokens equal, max error elsewhere relative to sum_j |w_j y_j|)."""
    import torch

    valid = ids >= 0
    ranks = torch.where(valid, ids.long() // SLOTS_PER_RANK, world)
    per_rank = torch.zeros(ids.shape[0], world + 1, dtype=torch.long, device=ids.device)
    per_rank = per_rank.scatter_add_(1, ranks, torch.ones_like(ranks))[:, :world]
    exact = (per_rank <= 1).all(1)
    equal = torch.equal(out[exact], ref[exact])
    scale = 1 + ids.clamp(min=0).float() / 8  # the fake expert's factor per term
    terms = (weights.float()[:, :, None] * x.float()[:, None, :] * scale[:, :, None]).abs()
    terms = terms.mul(valid[:, :, None]).sum(1)
    err = ((out.float() - ref.float()).abs() / (terms + 1e-30))[~exact]
    return equal, float(err.max()) if err.numel() else 0.0


def _rank_main(rank: int, world: int, port: int, emulate: bool, profile: bool, layer: str, results) -> None:
    _use_layer(layer)
    try:
        results.put((rank, True, _rank_work(rank, world, port, emulate, profile)))
    except BaseException:  # noqa: BLE001 - the parent reports it
        results.put((rank, False, traceback.format_exc()[-3000:]))


def _rank_work(rank: int, world: int, port: int, emulate: bool, profile: bool) -> dict:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    if emulate:
        os.environ.update(TRITON_INTERPRET="1", MOESERVE_NVSHMEM_EMULATE="1")
    sys.path.insert(0, str(REPO))
    import torch
    import torch.distributed as dist

    from moeserve.dispatch import LocalDispatcher, OneSidedDispatcher
    from moeserve.dispatch.put_kernels import TritonPuts
    from moeserve.parallel_state import ParallelContext

    if emulate:
        from moeserve.dispatch.shm_heap import ShmHeap as heap_cls
        dev = torch.device("cpu")
    else:
        from moeserve.dispatch.nvshmem_heap import NvshmemHeap as heap_cls  # type: ignore[assignment]
        torch.cuda.set_device(0)
        dev = torch.device("cuda", 0)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ctx = ParallelContext(ep_size=world, ep_rank=rank, ep_group=dist.group.WORLD)
    num_slots = world * SLOTS_PER_RANK
    disp = OneSidedDispatcher(num_slots, ctx, lambda n: heap_cls.create(n, rank, world, ctx.ep_group), TritonPuts(),
                              timeout_s=60, capacity_tokens=max(t for t, _ in CASES), device=dev)  # fmt: skip
    local = LocalDispatcher(num_slots)
    checked, mismatches = 0, []
    dtypes = (torch.float32,) if emulate else (torch.float32, torch.bfloat16)
    cases = [(t, h) for t, h in CASES if not emulate or h <= 256 and t <= 16]
    with torch.inference_mode():
        for i, ((tokens, hidden), dtype, routing) in enumerate(
            (c, d, r) for c in cases for d in dtypes for r in ("random", "hot", "dropped")
        ):
            x, ids, w = _inputs(world, tokens, hidden, dtype, i, routing, dev)
            mine = slice(rank * tokens, (rank + 1) * tokens)
            batch, handle = disp.dispatch(x[mine], ids[mine], w[mine], max_tokens=tokens)
            out = disp.combine(_fake_expert(batch.hidden, batch.counts, rank * SLOTS_PER_RANK), handle)
            ref_batch, ref_handle = local.dispatch(x, ids, w)
            ref_out = local.combine(_fake_expert(ref_batch.hidden, ref_batch.counts, 0), ref_handle)[mine]
            ends = ref_batch.offsets.long().tolist()
            lo = ends[rank * SLOTS_PER_RANK - 1] if rank else 0
            hi = ends[(rank + 1) * SLOTS_PER_RANK - 1]
            same_rows = torch.equal(batch.hidden, ref_batch.hidden[lo:hi])
            exact, err = _combine_error(out, ref_out, ids[mine], w[mine], x[mine], world)
            checked += 1
            if not (same_rows and exact and err <= (1e-6 if dtype == torch.float32 else 2e-2)):
                mismatches.append(f"T={tokens} H={hidden} {dtype} {routing}: rows equal {same_rows}, exact tokens "
                                  f"equal {exact}, others' error {err:.2e} x their terms")  # fmt: skip
        timings = {}
        for tokens, hidden in TIMED if not emulate else ((1, 256),):
            x, ids, w = _inputs(world, tokens, hidden, torch.bfloat16 if not emulate else torch.float32, 99, "random",
                                dev)  # fmt: skip
            mine = slice(rank * tokens, (rank + 1) * tokens)
            xs, idss, ws = x[mine], ids[mine], w[mine]
            got = {}
            for name, d in (("nvshmem", disp), ("local", LocalDispatcher(num_slots))):
                times = []
                for it in range(30 if not emulate else 3):
                    dist.barrier()
                    start = time.perf_counter()
                    b, h = d.dispatch(xs, idss, ws, max_tokens=tokens) if d is disp else d.dispatch(xs, idss, ws)
                    d.combine(b.hidden, h)
                    if dev.type == "cuda":
                        torch.cuda.synchronize()
                    if it >= 5 or emulate:
                        times.append((time.perf_counter() - start) * 1e6)
                got[name] = median(times)
            timings[f"T={tokens} H={hidden}"] = got
        table = _profile(disp, world, rank, dev, emulate) if profile else None
    disp.close()
    dist.destroy_process_group()
    return {"checked": checked, "mismatches": mismatches, "timings_us": timings, "profile": table}


def _profile(disp, world: int, rank: int, dev, emulate: bool) -> str | None:
    """Rank 0's torch profiler table over PROFILED dispatch + combine calls (every rank makes them)."""
    import torch
    import torch.distributed as dist

    (tokens, calls), hidden = (PROFILED, HIDDEN) if not emulate else ((1, 2), 256)
    x, ids, w = _inputs(world, tokens, hidden, torch.bfloat16 if not emulate else torch.float32, 7, "random", dev)
    mine = slice(rank * tokens, (rank + 1) * tokens)
    acts = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    if rank == 0:
        _label_phases(disp)
    dist.barrier()
    with torch.profiler.profile(activities=acts) if rank == 0 else _nothing() as prof:
        for _ in range(calls):
            b, h = disp.dispatch(x[mine], ids[mine], w[mine], max_tokens=tokens)
            disp.combine(b.hidden, h)
        if dev.type == "cuda":
            torch.cuda.synchronize()
    if rank:
        return None
    return f"{calls} calls, T={tokens} H={hidden}\n" + prof.key_averages().table(
        sort_by="cpu_time_total", row_limit=30, max_name_column_width=48)


def _label_phases(disp) -> None:
    """Named ranges in the profile for the protocol's parts (## rows): each kernel phase, the waits, the reads."""
    import torch

    from moeserve.dispatch import onesided

    def labelled(name, fn):
        def call(*a, **kw):
            with torch.profiler.record_function(f"## {name}"):
                return fn(*a, **kw)
        return call

    for obj, attr in ((disp.puts, "send"), (disp.puts, "expand"), (disp.puts, "partial"), (disp.puts, "total"),
                      (disp.heap, "load_words"), (disp, "dispatch"), (disp, "combine")):
        setattr(obj, attr, labelled(f"{type(obj).__name__}.{attr}", getattr(obj, attr)))
    onesided.wait_for_flags = labelled("wait_for_flags", onesided.wait_for_flags)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def run_world(world: int, emulate: bool, timeout_s: float, profile: bool = False, layer: str = "mixtral"
              ) -> dict:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=_rank_main, args=(r, world, port, emulate, profile, layer, results), daemon=True)
             for r in range(world)]  # fmt: skip
    for p in procs:
        p.start()
    out: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < world:
            if time.monotonic() > deadline:
                return {"status": f"timed out after {timeout_s:.0f} s (ranks {sorted(set(range(world)) - set(out))})"}
            try:
                rank, ok, value = results.get(timeout=1.0)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if r not in out and p.exitcode is not None]
                if dead:
                    return {"status": f"ranks {dead} exited (status {procs[dead[0]].exitcode}) without a result"}
                continue
            if not ok:
                return {"status": f"rank {rank} raised", "error": value}
            out[rank] = value
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    first = out[0]
    bad = [m for r in range(world) for m in out[r]["mismatches"]]
    return {"status": "passed" if not bad else "MISMATCH", "cases_per_rank": first["checked"], "mismatches": bad[:5],
            "timings_us_rank0": first["timings_us"],
            **({"profile_rank0": first["profile"]} if profile else {})}  # fmt: skip


def check(worlds=(1, 2), emulate: bool = False, timeout_s: float = 150.0, profile: bool = False,
          layer: str = "mixtral") -> dict:
    """{world: result}; a world that fails (no nvshmem4py, no MPG support) is a result, not an exception."""
    return {str(w): run_world(w, emulate, timeout_s, profile, layer) for w in worlds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--dry-run", action="store_true", help="shared-memory heap on the CPU under TRITON_INTERPRET=1")
    p.add_argument("--timeout", type=float, default=150.0, help="seconds per world size")
    p.add_argument("--profile", action="store_true", help="add rank 0's torch profiler table (PROFILED calls)")
    p.add_argument("--layer", choices=sorted(LAYERS), default="mixtral",
                   help="slots per rank, top-k and hidden: mixtral 8 / 4 / 4096, deepseek 32 / 8 / 7168")
    args = p.parse_args(argv)
    result = check(tuple(args.worlds), args.dry_run, args.timeout, args.profile, args.layer)
    tables = {w: r.pop("profile_rank0", None) for w, r in result.items()}
    print(json.dumps(result, indent=1))
    for w, table in tables.items():
        if table:
            print(f"\nworld {w}, rank 0, torch profiler: {table}")
    return 0 if all(r["status"] == "passed" for r in result.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
