"""MoE layer time at ep=4 on gloo (4 processes): moeserve (router + dispatch + grouped expert GEMM +
combine) vs DeepSpeed's `deepspeed.moe.layer.MoE`, same experts, hidden size and routing, timed in
one run and reported as a ratio. Not run by CI; numbers go to docs/dispatch.md.

DeepSpeed lives in its own venv (never a moeserve dependency), run from the repository root:
    python -m venv --system-site-packages VENV && VENV/bin/pip install deepspeed
    TORCH_EXTENSIONS_DIR=SCRATCH PYTHONPATH=. VENV/bin/python benchmarks/moe_layer_vs_deepspeed.py --tokens 128 256 512
The first DeepSpeed start compiles a shared-memory op (~2.5 min); later starts take seconds.

Routing is made identical: DeepSpeed's top-2 gate without 2nd-expert sampling, random token
selection or token dropping (capacity = the largest expert count, agreed over ranks) picks the two
largest logits and renormalizes their softmax weights, which is moeserve's SoftmaxTopKRouter with
renormalize=True; the gate weights and every expert's weights are copied across. Each run also
reports the largest difference between the two layers' outputs.

Where the routing comes from:
- default: random hidden states through a random gate (near-even expert load);
- `--skew s`: s * a fixed random direction added to every hidden state (a few experts run hot);
- `--mixtral-trace PATH [PATH ...]`: real per-token top-2 routing of Mixtral-8x7B
  (the mixtral_per_token/*.jsonl dumps, records of several files pooled). One layer's
  recorded (experts, gating_probs) pairs are shuffled once (fixed seed) and tiled cyclically to
  ep * tokens rows; rank r takes rows [r * tokens, (r + 1) * tokens). `--trace-layer median`
  (default) takes the layer whose hottest/mean expert load is the median of the 32 (a typical
  layer; ~250-800 recorded tokens, so large batches repeat them but keep that layer's load mix),
  `all` pools every layer (which flattens the load: each layer has different hot experts), an
  integer picks that layer. Neither layer's code is touched to force the routing: the gate weight
  becomes TRACE_SCALE * [I_E | 0] and each token's first E hidden features carry its router logits
  / TRACE_SCALE, logits = log(p) on the two recorded experts and -TRACE_SCALE elsewhere, so both
  top-2 gates pick exactly the recorded pair with weights p1 / (p1 + p2) (the recorded probs are
  already renormalized). The script asserts moeserve's router returns the recorded routing; the
  output difference column shows DeepSpeed computed the same thing. The other hidden features
  stay random.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

# power of two: the logits pass through hidden / TRACE_SCALE and the gate's * TRACE_SCALE exactly
TRACE_SCALE = 64.0


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
    if args.mixtral_trace:  # the gate passes each token's first E hidden features through as logits
        moe.deepspeed_moe.gate.wg.weight.data.copy_(TRACE_SCALE * torch.eye(args.experts, args.hidden))
    local = moe.deepspeed_moe.experts.deepspeed_experts
    for i, expert in enumerate(local):  # distinct weights per global expert
        g = torch.Generator().manual_seed(1000 + rank * len(local) + i)
        for p in expert.parameters():
            p.data.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return moe.eval()


def build_moeserve(ds_moe: nn.Module, args: argparse.Namespace, rank: int, dispatch: str):
    from moeserve.kernels.base import bind_kernels
    from moeserve.kernels.registry import make_kernel_set
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
        bind_kernels(layer, make_kernel_set("cpu"))  # what ModelRunner does after loading: oneDNN-packed expert GEMMs
    return layer, make_dispatcher(dispatch, args.experts, ctx)


def _expert_load(records: list[dict], experts: int) -> torch.Tensor:
    """Rows per expert [E] of these trace records."""
    ids = torch.tensor([r["experts"] for r in records], dtype=torch.int64)
    return torch.bincount(ids.flatten(), minlength=experts).float()


def load_trace(paths: list[str], layer: str, experts: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Mixtral per-token routing of one layer (or all pooled) -> ids [N, 2] int64, probs [N, 2] fp32
    (already renormalized to sum to 1), and a line saying which records these are."""
    records = [json.loads(line) for path in paths for line in open(path) if line.strip()]
    by_layer: dict[int, list[dict]] = {}
    for r in records:
        by_layer.setdefault(r["layer"], []).append(r)
    loads = {lay: _expert_load(rs, experts) for lay, rs in by_layer.items()}
    imbalance = {lay: float(c.max() / c.mean()) for lay, c in loads.items()}
    if layer == "all":
        chosen, what = records, f"all {len(by_layer)} layers pooled"
    else:
        pick = sorted(imbalance, key=imbalance.get)[len(imbalance) // 2] if layer == "median" else int(layer)
        if pick not in by_layer:
            raise SystemExit(f"--trace-layer {layer}: the trace has layers {min(by_layer)}-{max(by_layer)}, 'median' or 'all'")
        chosen = by_layer[pick]
        what = f"layer {pick}" + (f" (median hottest/mean of {len(by_layer)} layers)" if layer == "median" else "")
        what += f", hottest/mean {imbalance[pick]:.2f} over its {len(chosen)} tokens"
    ids = torch.tensor([r["experts"] for r in chosen], dtype=torch.int64)
    if int(ids.max()) >= experts:
        raise SystemExit(f"the trace routes to expert {int(ids.max())}: pass --experts {int(ids.max()) + 1} or more")
    probs = torch.tensor([r["gating_probs"] for r in chosen], dtype=torch.float32)
    return ids, probs, f"Mixtral trace {' + '.join(os.path.basename(p) for p in paths)}, {what}"


def trace_slice(ids: torch.Tensor, probs: torch.Tensor, T: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's T rows of the shuffled trace, tiled cyclically to ep * T rows:
    ids [T, 2] int64, probs [T, 2] fp32."""
    order = torch.randperm(len(ids), generator=torch.Generator().manual_seed(0))
    rows = order[torch.arange(rank * T, (rank + 1) * T) % len(ids)]
    return ids[rows], probs[rows]


def trace_logits(ids: torch.Tensor, probs: torch.Tensor, experts: int) -> torch.Tensor:
    """Router logits [T, E] whose softmax top-2 is exactly `ids` with weights `probs` / sum."""
    logits = torch.full((len(ids), experts), -TRACE_SCALE)
    return logits.scatter_(1, ids, probs.log())


def hidden_states(args: argparse.Namespace, rank: int, T: int, routes) -> torch.Tensor:
    """This rank's input [T, H]; with trace routes (ids, probs) its first E features carry the logits."""
    x = torch.randn(T, args.hidden, generator=torch.Generator().manual_seed(rank * 7 + T))
    x += args.skew * torch.randn(args.hidden, generator=torch.Generator().manual_seed(1))
    if routes is not None:
        x[:, : args.experts] = trace_logits(*routes, args.experts) / TRACE_SCALE
    return x


def check_trace_routing(layer: nn.Module, x: torch.Tensor, routes: tuple[torch.Tensor, torch.Tensor]) -> None:
    """moeserve's gate + router must return the recorded pair and weights (order aside)."""
    ids, probs = routes
    got_ids, got_w = layer.router(layer.gate(x))
    got_ids, order = got_ids.sort(dim=1)
    want_ids, want_order = ids.sort(dim=1)
    assert torch.equal(got_ids, want_ids), "crafted logits did not select the recorded experts"
    assert torch.allclose(got_w.gather(1, order), probs.gather(1, want_order), atol=1e-5), "weights differ"


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


def _load_imbalance(ds_moe: nn.Module, x: torch.Tensor, experts: int) -> tuple[float, float]:
    """(hottest expert's rows over the mean, all ranks summed; DeepSpeed's padded expert rows over
    the routed rows: every rank runs E * capacity rows, capacity = the largest per-rank expert count)."""
    logits = ds_moe.deepspeed_moe.gate.wg(x)
    counts = torch.bincount(logits.topk(2, dim=1).indices.flatten(), minlength=experts).float()
    capacity = counts.max().clone()
    dist.all_reduce(capacity, op=dist.ReduceOp.MAX)
    padding = float(experts * capacity / counts.sum())  # every rank routes the same 2T rows
    dist.all_reduce(counts)
    return float(counts.max() / counts.mean()), padding


def worker(rank: int, args: argparse.Namespace, port: int, results, trace) -> None:
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
            routes = None if trace is None else trace_slice(*trace, T, rank)
            x = hidden_states(args, rank, T, routes)
            row["imbalance"], row["ds_padding"] = _load_imbalance(ds_moe, x, args.experts)
            ds_out = ds_moe(x[None])[0][0]
            runs = {"deepspeed": lambda x=x: ds_moe(x[None])}
            for d, (layer, disp) in layers.items():
                if routes is not None:
                    check_trace_routing(layer, x, routes)
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
    parser.add_argument("--mixtral-trace", nargs="+", metavar="PATH",
                        help="drive both layers with recorded Mixtral top-2 routing (JSONL; several files are pooled)")
    parser.add_argument("--trace-layer", default="median",
                        help="'median' (layer with the median hottest/mean load), 'all' (pooled), or a layer index")
    args = parser.parse_args()
    if args.mixtral_trace and args.skew:
        parser.error("--skew changes the routing; a --mixtral-trace fixes it: pass one of them")
    trace, routing = None, f"random hidden states, skew {args.skew}"
    if args.mixtral_trace:
        ids, probs, routing = load_trace(args.mixtral_trace, args.trace_layer, args.experts)
        trace = (ids, probs)
    from socket import socket

    with socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args, port, results, trace)) for r in range(args.ep)]
    for p in procs:
        p.start()
    rows = results.get(timeout=1800)
    for p in procs:
        p.join()
    print(f"ep={args.ep} experts={args.experts} top-2 hidden={args.hidden} inter={args.inter} fp32, gloo, "
          f"{args.threads} thread(s)/rank, moeserve experts {'packed' if args.packed else 'unpacked'}; routing: {routing}; "
          "medians per layer call: wall ms (CPU ms summed over ranks)")
    head = ["tokens/rank", "hottest/mean expert load", "deepspeed padded/routed rows", "deepspeed"]
    head += [f"moeserve-{d}" for d in args.dispatch]
    head += [f"speedup {d} wall (cpu)" for d in args.dispatch] + [f"max rel diff {d}" for d in args.dispatch]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        cells = [str(r["tokens"]), f"{r['imbalance']:.2f}", f"{r['ds_padding']:.2f}"]
        cells += [f"{r[n] * 1e3:.1f} ({r['cpu_' + n] * 1e3:.0f})" for n in ["deepspeed"] + args.dispatch]
        cells += [f"{r['deepspeed'] / r[d]:.2f}x ({r['cpu_deepspeed'] / r['cpu_' + d]:.2f}x)" for d in args.dispatch]
        cells += [f"{r[f'rel_err_{d}']:.1e}" for d in args.dispatch]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
