"""MoE layer time at ep=4 on gloo (4 processes): moeserve (router + dispatch + grouped expert GEMM +
combine) vs DeepSpeed's `deepspeed.moe.layer.MoE`, same experts, hidden size and routing, timed in
one run and reported as a ratio. Not run by CI; numbers go to docs/dispatch.md.

DeepSpeed lives in its own venv (never a moeserve dependency); see /work/shared/PEERS.md:
    python -m venv --system-site-packages /work/venv-ds && /work/venv-ds/bin/pip install deepspeed
    TORCH_EXTENSIONS_DIR=/work/ds_ext PYTHONPATH=/work/main \\
        /work/venv-ds/bin/python benchmarks/moe_layer_vs_deepspeed.py --tokens 128 256 512
The first DeepSpeed start compiles a shared-memory op (~2.5 min); later starts take seconds.

Routing is made identical: DeepSpeed's top-2 gate without 2nd-expert sampling, random token
selection or token dropping (capacity = the largest expert count, agreed over ranks) picks the two
largest logits and renormalizes their softmax weights, which is moeserve's SoftmaxTopKRouter with
renormalize=True; the gate weights and every expert's weights are copied across. Each run also
reports the largest difference between the two layers' outputs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


class SwiGLU(nn.Module):
    """The expert both layers run: w2(silu(w1 x) * w3 x)."""

    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.w1 = nn.Linear(hidden, inter, bias=False)
        self.w3 = nn.Linear(hidden, inter, bias=False)
        self.w2 = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


def build_deepspeed(args: argparse.Namespace, rank: int) -> nn.Module:
    from deepspeed.moe.layer import MoE

    torch.manual_seed(0)  # the gate must be identical on every rank
    moe = MoE(
        hidden_size=args.hidden, expert=SwiGLU(args.hidden, args.inter), num_experts=args.experts,
        ep_size=args.ep, k=2, drop_tokens=False, use_rts=False, top2_2nd_expert_sampling=False,
    )
    moe.set_deepspeed_parallelism()
    local = moe.deepspeed_moe.experts.deepspeed_experts
    for i, expert in enumerate(local):  # distinct weights per global expert
        g = torch.Generator().manual_seed(1000 + rank * len(local) + i)
        for p in expert.parameters():
            p.data.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return moe.eval()


def build_moeserve(ds_moe: nn.Module, args: argparse.Namespace, rank: int, dispatch: str):
    from moeserve.dense.gemm import pack_weights
    from moeserve.dispatch import make_dispatcher
    from moeserve.moe.layer import MoELayer
    from moeserve.moe.router import SoftmaxTopKRouter
    from moeserve.parallel_state import ParallelContext

    ctx = ParallelContext(ep_size=args.ep, ep_rank=rank, ep_group=dist.group.WORLD)
    gate = nn.Linear(args.hidden, args.experts, bias=False)
    gate.weight.data.copy_(ds_moe.deepspeed_moe.gate.wg.weight.data)
    layer = MoELayer(gate, SoftmaxTopKRouter(2, renormalize=True), args.experts, args.hidden, args.inter, ctx,
                     torch.float32)
    for i, expert in enumerate(ds_moe.deepspeed_moe.experts.deepspeed_experts):
        layer.experts.set_slot(i, expert.w1.weight.data, expert.w3.weight.data, expert.w2.weight.data)
    if args.packed:
        pack_weights(layer)  # what ModelRunner does after loading: oneDNN-packed expert GEMMs on CPU
    return layer, make_dispatcher(dispatch, args.experts, ctx)


def timed(fn, repeats: int) -> list[tuple[float, float]]:
    """Per call: (wall time with barriers around the call, so the slowest rank sets it; CPU time of
    all ranks together). On a shared, oversubscribed machine the CPU time is the steadier figure."""
    times = []
    for _ in range(repeats):
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        cpu = torch.tensor([time.process_time() - c0], dtype=torch.float64)
        dist.barrier()
        wall = time.perf_counter() - t0
        dist.all_reduce(cpu)
        times.append((wall, float(cpu)))
    return times


def _load_imbalance(ds_moe: nn.Module, x: torch.Tensor, experts: int) -> float:
    """Hottest expert's rows over the mean, over all ranks: DeepSpeed pads every expert to the hottest."""
    logits = ds_moe.deepspeed_moe.gate.wg(x)
    counts = torch.bincount(logits.topk(2, dim=1).indices.flatten(), minlength=experts).float()
    dist.all_reduce(counts)
    return float(counts.max() / counts.mean())


def worker(rank: int, args: argparse.Namespace, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(args.ep), LOCAL_SIZE=str(args.ep), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(args.threads)
    import deepspeed

    deepspeed.comm.init_distributed(dist_backend="gloo")
    ds_moe = build_deepspeed(args, rank)
    layers = {d: build_moeserve(ds_moe, args, rank, d) for d in args.dispatch}
    rows = []
    with torch.no_grad():
        for T in args.tokens:
            row: dict[str, float] = {"tokens": T}
            x = torch.randn(T, args.hidden, generator=torch.Generator().manual_seed(rank * 7 + T))
            x += args.skew * torch.randn(args.hidden, generator=torch.Generator().manual_seed(1))
            row["imbalance"] = _load_imbalance(ds_moe, x, args.experts)
            ds_out = ds_moe(x[None])[0][0]
            runs = {"deepspeed": lambda x=x: ds_moe(x[None])}
            for d, (layer, disp) in layers.items():
                out = layer(x, disp)
                err = (out - ds_out).abs().max() / ds_out.abs().max()
                dist.all_reduce(err, op=dist.ReduceOp.MAX)
                row[f"rel_err_{d}"] = float(err)
                runs[d] = lambda layer=layer, disp=disp, x=x: layer(x, disp)
            for name, fn in runs.items():  # warm up
                timed(fn, 2)
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
            for _ in range(args.repeats):  # interleaved, so drift on the shared machine hits both
                for name, fn in runs.items():
                    times[name] += timed(fn, 1)
            row.update({name: statistics.median(w for w, _ in t) for name, t in times.items()})
            row.update({f"cpu_{name}": statistics.median(c for _, c in t) for name, t in times.items()})
            rows.append(row)
    if rank == 0:
        results.put(rows)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ep", type=int, default=4)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--inter", type=int, default=1024)
    parser.add_argument("--tokens", type=int, nargs="+", default=[16, 128, 512])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dispatch", nargs="+", default=["a2a", "agrs"])
    parser.add_argument("--no-packed", dest="packed", action="store_false",
                        help="leave moeserve's expert weights unpacked (torch's MKL GEMMs, as DeepSpeed's nn.Linear)")
    parser.add_argument("--skew", type=float, default=0.0,
                        help="add skew * a fixed random direction to every hidden state: uneven expert load")
    args = parser.parse_args()
    from socket import socket

    with socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args, port, results)) for r in range(args.ep)]
    for p in procs:
        p.start()
    rows = results.get(timeout=1800)
    for p in procs:
        p.join()
    print(f"ep={args.ep} experts={args.experts} top-2 hidden={args.hidden} inter={args.inter} fp32, gloo, "
          f"{args.threads} thread(s)/rank, skew {args.skew}; medians per layer call: wall ms (CPU ms summed over ranks)")
    head = ["tokens/rank", "hottest/mean expert load", "deepspeed"] + [f"moeserve-{d}" for d in args.dispatch]
    head += [f"speedup {d} wall (cpu)" for d in args.dispatch] + [f"max rel diff {d}" for d in args.dispatch]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        cells = [str(r["tokens"]), f"{r['imbalance']:.2f}"]
        cells += [f"{r[n] * 1e3:.1f} ({r['cpu_' + n] * 1e3:.0f})" for n in ["deepspeed"] + args.dispatch]
        cells += [f"{r['deepspeed'] / r[d]:.2f}x ({r['cpu_deepspeed'] / r['cpu_' + d]:.2f}x)" for d in args.dispatch]
        cells += [f"{r[f'rel_err_{d}']:.1e}" for d in args.dispatch]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
