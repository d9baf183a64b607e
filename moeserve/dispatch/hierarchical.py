"""Hierarchical expert dispatch across hosts (`hier`; `auto` with --nodes > 1): rows for ranks on this
host through the host's symmetric heap (the one-sided protocol of onesided.py, shm on CPUs, nvshmem
on GPUs), rows for other hosts through one exchange per host pair on each rail, aggregated per
destination host, as DeepEP's normal mode (RDMA to the peer host, then NVLink inside it).

The ep group's W ranks lie node-major on N hosts of L ranks each; rank (h, l) is ep rank h * L + l.
Rail l is the N ranks (0, l), (1, l), ...: the ranks that hold index l on every host. Slot p lives on
ep rank p // S (S slots per rank), host p // (L * S).

dispatch, on rank (h, l) with T tokens:
  1. rail: to each host A != h, over rail l, [rows for A, bad-routing flag] and the rows themselves,
     one row per (token, host A) with any top-k position on A (a2a's plan over hosts instead of
     ranks): [hidden | host-local slot per top-k position (-1 elsewhere) | router weights] to rank
     (A, l). A token whose k experts lie on three ranks of host A crosses the network once. With the
     step's token bound (max_tokens, as the engine passes it) this is one collective of fixed chunks
     (the counts in each chunk's header), else two (counts, then rows). Any bad routing makes every
     rank raise (below), never a hang.
  2. host: the one-sided dispatch inside host h (W' = L ranks), of this rank's virtual tokens: its own
     tokens with positions on host h, then the rows it received from each other host, in host order.
     Each virtual token's positions are renamed to virtual slots: host-local slot d * S + e of a row
     from host A becomes d * (S * N) + e * N + A, so the inner ExpertBatch of rank d is grouped by
     (e, A), then inner source l', then token: slot-major, then global source rank A * L + l', then
     token, which is `local`'s order on the whole batch. No reordering copy: its counts summed over A
     are the ExpertBatch's per-slot counts, its rows are the ExpertBatch's rows.
combine (the reverse):
  3. host: the one-sided combine inside host h returns each virtual token's fp32 sum of its terms on
     host h (its host partial; reading the expert output in place on shm's C++ path: `local`'s sum of
     those terms, bit for bit);
  4. rail: each received row's host partial back to the rank it came from (fp32 rows);
  5. each token sums its host partials in order of each host's first top-k position, in fp32, and
     rounds once to the payload dtype. Exact (`local`'s bits) for tokens whose positions lie on one host,
     or on distinct hosts; otherwise regrouped, within fp32 rounding (docs/dispatch.md, "Numerics").

Bad routing (or T > max_tokens) on any rank: its rail learns it in step 1; on every host the rail
member then hands the host's dispatch an invalid id, so every rank of every host raises in step 2,
having entered the same collectives and flags in the same order.
Sizes: the host heap holds M = N * max_tokens rows per (source, destination) pair: a rank's virtual
tokens are at most its own plus one rail peer's per other host.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from moeserve.dispatch.a2a import plan_sends
from moeserve.dispatch.base import ExpertBatch, Handle, routing_error, shape_error, sum_in_position_order
from moeserve.dispatch.onesided import OneSidedDispatcher, OneSidedHandle
from moeserve.dispatch.wire import Column, pack_rows, row_bytes, slot_dtype, unpack_rows, weight_dtype
from moeserve.parallel_state import ParallelContext


@dataclass
class HierHandle(Handle):
    inner: OneSidedHandle
    send_counts: list[int]  # [N] rows this rank sent to each host over its rail (0 for its own)
    recv_counts: list[int]  # [N] rows it received from each host (0 for its own)
    own_rows: int  # its own virtual tokens (rows of its plan for host h)
    send_pos: torch.Tensor  # [P] int64: t * k + first position on the host, of every planned row, host-major
    num_tokens: int
    top_k: int
    out_dtype: torch.dtype


def inner_context(ctx: ParallelContext) -> ParallelContext:
    """The host's part of `ctx`: its L ranks as an ep group of their own (the host heap's world)."""
    return ParallelContext(ep_size=ctx.node_size, ep_rank=ctx.ep_rank % ctx.node_size, ep_group=ctx.node_group)


class HierDispatcher:
    """Slots split evenly over ctx.ep_size ranks on ctx.ep_size / ctx.node_size hosts. `inner`: the
    one-sided dispatcher of this rank's host (over inner_context(ctx), with S x hosts virtual slots per
    rank; registry.py builds it). Mutates nothing but `inner`; every rank must call dispatch and combine
    in the same order (rail collectives and host flags)."""

    def __init__(self, num_slots: int, ctx: ParallelContext, inner: OneSidedDispatcher):
        W, L = ctx.ep_size, ctx.node_size
        if ctx.rail_group is None or L < 2 or W % L or num_slots % W:
            raise ValueError(f"hierarchical dispatch needs an ep group over several hosts of several ranks each "
                             f"(ep_size {W}, {L} per host) and slots that split evenly ({num_slots})")
        self.num_slots, self.ctx = num_slots, ctx
        self.num_local_slots = num_slots // W
        self.hosts, self.per_host = W // L, L
        self.host = ctx.ep_rank // L
        self.inner = inner
        assert inner.num_local_slots == self.num_local_slots * self.hosts, "virtual slots: S x hosts per rank"
        if L > len(os.sched_getaffinity(0)):
            # more of the host's ranks than cores: a flag wait that yields keeps taking the cores its peers
            # need (their expert compute, their rail exchange); sleep on the flags at once (docs/dispatch.md)
            inner.yield_s = 0.0

    def dispatch(
        self,
        hidden: torch.Tensor,
        topk_ids: torch.Tensor,
        topk_weights: torch.Tensor,
        max_tokens: int | None = None,
        ids_valid: bool = False,
    ) -> tuple[ExpertBatch, HierHandle]:
        """hidden [T, H]; topk_ids [T, k] int physical slots (-1 = dropped); topk_weights [T, k] float;
        max_tokens: >= T on every rank, identical on all ranks (None: the host's dispatch agrees on it).
        ids_valid: the caller vouches for the id range (base.py): no range check here, and the virtual
        ids handed to the host's dispatch are vouched for too unless a rail member's routing was bad."""
        # T tokens, k top-k, H hidden, N hosts, L ranks per host, S slots per rank, V virtual tokens
        T, k = topk_ids.shape
        N, L, S, h = self.hosts, self.per_host, self.num_local_slots, self.host
        err = shape_error(topk_ids) if ids_valid else routing_error(topk_ids, self.num_slots)
        if err is None and max_tokens is not None and T > max_tokens:
            err = f"{T} tokens exceed max_tokens={max_tokens} given to dispatch"
        plan = None if err else plan_sends(topk_ids, L * S, N)
        w_dtype = weight_dtype(topk_weights)
        columns = [Column(hidden.dtype, hidden.shape[1]), Column(slot_dtype(L * S), k), Column(w_dtype, k)]
        send_counts = [0] * N
        send = None
        if plan is not None:
            send_counts = plan.send_counts.tolist()
            send_counts[h] = 0  # its own host's rows stay here
            starts = [0]
            for c in plan.send_counts.tolist():
                starts.append(starts[-1] + c)
            own = slice(starts[h], starts[h + 1])
            keep = torch.ones(plan.token_idx.shape[0], dtype=torch.bool, device=hidden.device)
            keep[own] = False  # rows for other hosts, host-major
            send = pack_rows([hidden, plan.local_slots[keep], topk_weights.to(w_dtype)],
                             index=[plan.token_idx[keep], None, plan.token_idx[keep]])
        bad, recv_counts, recv = self._rail_dispatch(send, send_counts, plan is None, row_bytes(columns), max_tokens,
                                                     hidden.device)
        if bad:  # every rank of every host raises in the host's dispatch below
            v_hidden = hidden.new_zeros(1, hidden.shape[1])
            v_ids = torch.full((1, k), self.inner.num_slots, dtype=torch.int64, device=hidden.device)
            v_weights = torch.zeros(1, k, dtype=w_dtype, device=hidden.device)
            own_rows, send_pos = 0, torch.zeros(0, dtype=torch.int64, device=hidden.device)
        else:
            r_hidden, r_slots, r_weights = unpack_rows(recv, columns)
            own_tokens = plan.token_idx[own]
            # virtual tokens in host order: host A's rows received, or for A = h this rank's own
            parts_h, parts_s, parts_w, origin = [], [], [], []
            at = 0
            for A in range(N):
                if A == h:
                    parts_h.append(hidden[own_tokens])
                    parts_s.append(plan.local_slots[own])
                    parts_w.append(topk_weights[own_tokens].to(w_dtype))
                    n = own_tokens.shape[0]
                else:
                    n = recv_counts[A]
                    parts_h.append(r_hidden[at : at + n])
                    parts_s.append(r_slots[at : at + n])
                    parts_w.append(r_weights[at : at + n])
                    at += n
                origin.append(torch.full((n,), A, dtype=torch.int64, device=hidden.device))
            v_hidden, v_weights = torch.cat(parts_h), torch.cat(parts_w)
            v_ids = _virtual_slots(torch.cat(parts_s).long(), torch.cat(origin), S, N)
            own_rows, send_pos = own_tokens.shape[0], plan.send_pos
        inner_bound = None if max_tokens is None else N * max_tokens
        try:
            # the virtual ids of checked (or vouched-for) routing are valid; a bad flag's invalid id is checked
            batch, inner = self.inner.dispatch(v_hidden, v_ids, v_weights, max_tokens=inner_bound, ids_valid=not bad)
        except ValueError:
            detail = f": {err}" if err else ""
            raise ValueError(f"invalid expert routing on an ep rank (this is rank {self.ctx.ep_rank}){detail}") from None
        inner.out_dtype = torch.float32  # host partials travel and are summed in fp32
        counts = batch.counts.view(S, N).sum(1)  # virtual slot e * N + A -> slot e
        handle = HierHandle(inner, send_counts, recv_counts, own_rows, send_pos, T, k, hidden.dtype)
        return ExpertBatch(batch.hidden, torch.cumsum(counts, 0).to(torch.int32), counts), handle

    def _rail_dispatch(self, send: torch.Tensor | None, send_counts: list[int], bad: bool, row_bytes: int,
                       max_tokens: int | None, device: torch.device) -> tuple[bool, list[int], torch.Tensor]:
        """Steps 1 and 2 over this rank's rail: (whether any rail member's routing was bad, rows received
        from each host, the received rows [sum, row_bytes] uint8, host-major). send: this rank's packed rows
        for the other hosts, host-major (None when its own routing is bad). With max_tokens (identical on
        every rank) one collective of fixed chunks, [count, bad, max_tokens rows] per host, as agrs pads
        (at decode the bound is a few rows); without, counts first, then the rows."""
        # N hosts
        N, rail = self.hosts, self.ctx.rail_group
        if max_tokens is not None:
            chunk = 16 + -(-max_tokens * row_bytes // 8) * 8  # 8-byte aligned chunks: their headers are int64
            out = torch.empty(N, chunk, dtype=torch.uint8, device=device)
            header = out[:, :16].view(torch.int64)
            header[:, 0] = torch.tensor(send_counts)
            header[:, 1] = int(bad)
            at = 0
            for A, c in enumerate(send_counts):
                if c:
                    out[A, 16 : 16 + c * row_bytes] = send[at : at + c].reshape(-1)
                    at += c
            back = torch.empty_like(out)
            dist.all_to_all_single(back, out, group=rail)
            got = back[:, :16].view(torch.int64)
            if bool(got[:, 1].any()) or bad:
                return True, [0] * N, out.new_empty(0, row_bytes)
            counts = got[:, 0].tolist()
            rows = torch.cat([back[A, 16 : 16 + c * row_bytes] for A, c in enumerate(counts)])
            return False, counts, rows.view(-1, row_bytes)
        header = torch.tensor([[c, int(bad)] for c in send_counts], dtype=torch.int64, device=device)
        got = torch.empty_like(header)
        dist.all_to_all_single(got, header, group=rail)
        if bool(got[:, 1].any()) or bad:
            return True, [0] * N, header.new_empty(0, row_bytes, dtype=torch.uint8)
        counts = got[:, 0].tolist()
        rows = send.new_empty(sum(counts), row_bytes)
        dist.all_to_all_single(rows, send, counts, send_counts, group=rail)
        return False, counts, rows

    def expert_output(self, batch: ExpertBatch) -> torch.Tensor | None:
        """The host dispatcher's buffer (its sources then read the expert output where it lies)."""
        return self.inner.expert_output(batch)

    def combine(self, expert_out: torch.Tensor, handle: HierHandle) -> torch.Tensor:
        """expert_out [R, H] in ExpertBatch row order -> [T, H] in the dispatched hidden's dtype."""
        # V virtual tokens, N hosts, T tokens
        partial = self.inner.combine(expert_out, handle.inner)  # [V, H] fp32: each virtual token's host partial
        N, h = self.hosts, self.host
        own_at = sum(handle.recv_counts[:h])
        own = partial[own_at : own_at + handle.own_rows]
        others = torch.cat([partial[:own_at], partial[own_at + handle.own_rows :]])
        back = others.new_empty(sum(handle.send_counts), others.shape[1])
        dist.all_to_all_single(back, others.contiguous(), handle.send_counts, handle.recv_counts,
                               group=self.ctx.rail_group)
        before = sum(handle.send_counts[:h])
        rows = torch.cat([back[:before], own, back[before:]])  # the plan's order: host-major, tokens ascending
        return sum_in_position_order(rows, handle.send_pos, handle.num_tokens, handle.top_k, handle.out_dtype)


def _virtual_slots(host_slots: torch.Tensor, origin: torch.Tensor, S: int, N: int) -> torch.Tensor:
    """[V, k] host-local slots d * S + e (-1 dropped) of rows from host origin[v] -> the host dispatch's
    virtual slots d * (S * N) + e * N + origin: rank d's ExpertBatch then runs slot-major, host-major."""
    d, e = host_slots // S, host_slots % S
    virtual = d * (S * N) + e * N + origin[:, None]
    return torch.where(host_slots >= 0, virtual, -1)

