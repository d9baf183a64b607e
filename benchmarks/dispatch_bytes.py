"""Bytes each dispatch backend passes to its collectives, per token per MoE layer, against sending
one row per (token, expert). Not run by CI; the numbers go to docs/dispatch.md.

The W ranks run as threads in one process over a small in-process stand-in for the four
torch.distributed collectives the backends call (all_to_all_single, all_gather_single,
reduce_scatter_single, all_reduce); it moves the real tensors and counts, per rank, the bytes of
every input that leaves the rank (its own chunk of an all_to_all stays home; an all_gather sends
its input to W-1 peers; a reduce_scatter sends W-1 of its W chunks). Each run is checked against
`local` on the full routing so the counted traffic is traffic that computes the right answer.

    python benchmarks/dispatch_bytes.py
"""
from __future__ import annotations

import argparse
import threading
from dataclasses import dataclass

import torch
import torch.distributed as dist

from moeserve.dispatch import LocalDispatcher, make_dispatcher
from moeserve.parallel_state import ParallelContext


class ThreadWorld:
    """W threads as W ranks; each collective is two barriers around a shared mailbox."""

    def __init__(self, world: int):
        self.world = world
        self.barrier = threading.Barrier(world)
        self.mail: list = [None] * world
        self.local = threading.local()
        self.sent = [0] * world

    @property
    def rank(self) -> int:
        return self.local.rank

    def _exchange(self, item: object) -> list:
        self.mail[self.rank] = item
        self.barrier.wait()
        got = list(self.mail)
        self.barrier.wait()
        return got

    def all_to_all_single(self, out, inp, output_split_sizes=None, input_split_sizes=None, group=None):
        splits = input_split_sizes or [inp.shape[0] // self.world] * self.world
        chunks = inp.split(splits)
        self.sent[self.rank] += sum(c.nbytes for r, c in enumerate(chunks) if r != self.rank)
        got = self._exchange(chunks)
        out.copy_(torch.cat([got[src][self.rank] for src in range(self.world)]))

    def all_gather_single(self, out, inp, group=None):
        self.sent[self.rank] += (self.world - 1) * inp.nbytes
        out.copy_(torch.cat([t.reshape(-1) for t in self._exchange(inp)]).view_as(out))

    def reduce_scatter_single(self, out, inp, op=None, group=None):
        self.sent[self.rank] += (self.world - 1) * out.nbytes
        got = self._exchange(inp.view(self.world, *out.shape))
        total = got[0][self.rank].clone()
        for src in range(1, self.world):
            total += got[src][self.rank]
        out.copy_(total)

    def all_reduce(self, tensor, op=None, group=None):
        self.sent[self.rank] += (self.world - 1) * tensor.nbytes
        got = self._exchange(tensor.clone())
        reduce = torch.maximum if op == dist.ReduceOp.MAX else torch.add
        acc = got[0]
        for t in got[1:]:
            acc = reduce(acc, t)
        tensor.copy_(acc)

    def install(self) -> None:
        for name in ("all_to_all_single", "all_gather_single", "reduce_scatter_single", "all_reduce"):
            setattr(dist, name, getattr(self, name))


@dataclass(frozen=True)
class Setup:
    name: str
    experts: int
    top_k: int
    world: int
    hidden: int
    groups: int  # expert groups for group-limited routing (1 = plain top-k)
    topk_groups: int
    tokens_per_rank: int
    dtype: torch.dtype = torch.bfloat16


def route(setup: Setup, n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-limited top-k (DeepSeek-V3 style) over sigmoid scores with skewed expert popularity.
    Returns topk_ids [n, k] int64 and topk_weights [n, k] fp32."""
    # n tokens, E experts, G groups
    E, G = setup.experts, setup.groups
    popularity = torch.randn(E, generator=g)  # shared across tokens: some experts are hot
    scores = torch.sigmoid(torch.randn(n, E, generator=g) + popularity)
    if G > 1:
        group_score = scores.view(n, G, E // G).topk(2, dim=-1).values.sum(-1)  # [n, G]
        keep = torch.zeros(n, G, dtype=torch.bool).scatter_(1, group_score.topk(setup.topk_groups, dim=1).indices, True)
        scores = scores.masked_fill(~keep.repeat_interleave(E // G, dim=1), 0.0)
    weights, ids = scores.topk(setup.top_k, dim=1)
    return ids, weights / weights.sum(1, keepdim=True)


def measure(setup: Setup, backend: str, seed: int = 0) -> dict[str, float]:
    """Bytes sent per token (dispatch + combine, summed over ranks / total tokens) and routing stats."""
    # W ranks, T tokens per rank, N total tokens, k top-k, H hidden
    W, T, k, H = setup.world, setup.tokens_per_rank, setup.top_k, setup.hidden
    g = torch.Generator().manual_seed(seed)
    N = W * T
    hidden = torch.randn(N, H, generator=g).to(setup.dtype)
    ids, weights = route(setup, N, g)
    oracle = LocalDispatcher(setup.experts)
    o_batch, o_handle = oracle.dispatch(hidden, ids, weights)
    want = oracle.combine(o_batch.hidden, o_handle)  # identity experts

    world = ThreadWorld(W)
    world.install()
    outs: list = [None] * W
    errors: list = []

    def rank_main(rank: int) -> None:
        world.local.rank = rank
        try:
            ctx = ParallelContext(ep_size=W, ep_rank=rank, ep_group=None)
            disp = make_dispatcher(backend, setup.experts, ctx)
            sl = slice(rank * T, (rank + 1) * T)
            batch, handle = disp.dispatch(hidden[sl], ids[sl], weights[sl], max_tokens=T)
            outs[rank] = disp.combine(batch.hidden, handle)
        except BaseException as e:  # noqa: BLE001 - surface it instead of leaving peers at the barrier
            errors.append(e)
            world.barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(W)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    torch.testing.assert_close(torch.cat(outs).float(), want.float(), rtol=2e-2, atol=2e-2)

    S = setup.experts // W
    dest = ids // S
    src = torch.arange(N)[:, None] // T
    distinct = torch.zeros(N, W, dtype=torch.bool).scatter_(1, dest, True).sum(1).float()
    remote_pairs = float((dest != src).sum())  # (token, expert) rows that leave their rank
    elem = hidden.element_size()
    # per-(token, expert) baseline: hidden + 1-byte slot id + weight out, hidden back, remote rows only
    baseline = remote_pairs * (H * elem + 1 + weights.element_size()) + remote_pairs * H * elem
    return {
        "bytes_per_token": sum(world.sent) / N,
        "baseline_per_token": baseline / N,
        "distinct_over_k": float(distinct.mean()) / k,
        "remote_distinct_over_remote_k": float(
            (torch.zeros(N, W, dtype=torch.bool).scatter_(1, dest, True) & (torch.arange(W) != src)).sum()
        )
        / max(remote_pairs, 1.0),
    }


SETUPS = [
    Setup("DeepSeek-V3 top-8/256, 8 groups top-4, ep16", 256, 8, 16, 7168, 8, 4, 64),
    Setup("DeepSeek-V3 top-8/256, 8 groups top-4, ep32", 256, 8, 32, 7168, 8, 4, 32),
    Setup("Mixtral top-2/8, ep4", 8, 2, 4, 4096, 1, 1, 128),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="a2a,agrs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        "| setup | backend | KiB sent / token | per-(token,expert) KiB / token | ratio "
        "| target: remote distinct ranks / remote k | distinct ranks / k (incl. own) |"
    )
    print("|---|---|---|---|---|---|---|")
    for setup in SETUPS:
        for backend in args.backends.split(","):
            m = measure(setup, backend)
            ratio = m["bytes_per_token"] / m["baseline_per_token"]
            print(
                f"| {setup.name} | {backend} | {m['bytes_per_token'] / 1024:.1f} | "
                f"{m['baseline_per_token'] / 1024:.1f} | {ratio:.4f} | {m['remote_distinct_over_remote_k']:.4f} "
                f"| {m['distinct_over_k']:.4f} |"
            )


if __name__ == "__main__":
    main()
