"""The one-sided backend's vectorized math (onesided_plan.py) against its references, bit for bit:
plan_fanout vs a2a.plan_sends, expand_grid vs local.group_by_slot on the compacted rows, and
sum_in_j_order vs base.sum_in_position_order."""
from __future__ import annotations

import pytest
import torch

from moeserve.dispatch.a2a import plan_sends
from moeserve.dispatch.base import sum_in_position_order
from moeserve.dispatch import native
from moeserve.dispatch.local import LocalDispatcher, group_by_slot
from moeserve.dispatch.onesided_plan import expand_grid, plan_fanout, position_index, sum_in_j_order


def _shapes(seed: int):
    g = torch.Generator().manual_seed(seed)
    T, k, W, S = (int(torch.randint(lo, hi, (1,), generator=g)) for lo, hi in ((0, 20), (1, 4), (1, 5), (1, 4)))
    return g, T, k, W, S


@pytest.mark.parametrize("seed", range(40))
def test_plan_fanout_matches_plan_sends(seed: int) -> None:
    g, T, k, W, S = _shapes(seed)
    ids = torch.randint(-1, W * S, (T, k), generator=g).to(torch.int32 if seed % 2 else torch.int64)
    ref, got = plan_sends(ids, S, W), plan_fanout(ids, S, W, torch.int8)
    assert got.send_counts == ref.send_counts.tolist()
    for name in ("token_idx", "local_slots", "send_pos"):
        assert torch.equal(getattr(got, name), getattr(ref, name)), name
    assert torch.equal(got.dest, torch.repeat_interleave(torch.arange(W), ref.send_counts))
    assert torch.equal(got.row, torch.cat([torch.arange(n) for n in got.send_counts]) if T else got.row)


@pytest.mark.parametrize("seed", range(40))
def test_expand_grid_matches_group_by_slot_on_the_compacted_rows(seed: int) -> None:
    g, _, k, W, S = _shapes(seed)
    n = int(torch.randint(0, 6, (1,), generator=g))
    counts = [int(torch.randint(0, n + 1, (1,), generator=g)) for _ in range(W)]
    if n:
        counts[0] = n  # n is the largest count, as the dispatcher slices it
    grid = torch.randint(-1, S, (W, n, k), generator=g).to(torch.int8)
    before = grid.clone()
    row_pos, per_slot = expand_grid(grid, counts, S)
    assert torch.equal(grid, before)  # the heap's rows are read, never written
    ref_pos, ref_counts = group_by_slot(torch.cat([grid[s, : counts[s]] for s in range(W)]), S)
    assert torch.equal(per_slot, ref_counts)
    q, j = row_pos // k, row_pos % k  # grid row s * n + r -> compacted row offset[s] + r
    start = torch.tensor([sum(counts[:s]) for s in range(W)])
    assert torch.equal((start[q // max(n, 1)] + q % max(n, 1)) * k + j, ref_pos)


@pytest.mark.parametrize("seed", range(40))
def test_sum_in_j_order_matches_position_order(seed: int, monkeypatch) -> None:
    g, T, k, W, S = _shapes(seed)
    plan = plan_fanout(torch.randint(-1, W * S, (T, k), generator=g), S, W, torch.int8)
    terms = torch.randn(plan.send_pos.numel(), 6, generator=g)
    ref = sum_in_position_order(terms, plan.send_pos, T, k, torch.float32)
    rows = torch.cat([terms, torch.zeros(1, 6)])  # the zero row that absent positions name
    index = position_index(plan.send_pos, None, T, k, terms.shape[0])
    assert torch.equal(sum_in_j_order(rows, index), ref)
    strided = torch.empty(T, 12)[:, ::2]  # e.g. a fan-out view of peers' memory
    assert sum_in_j_order(rows, index, out=strided) is strided and torch.equal(strided, ref)
    monkeypatch.setattr("moeserve.dispatch.onesided_plan.DENSE_LIMIT", 0)  # the large-prefill branch
    assert torch.equal(sum_in_j_order(rows, index), ref)


NONE = torch.zeros(0, dtype=torch.int64)  # the C++ kernels' "not given" tensor


def _blocks(W: int, M: int, width: int, dtype: torch.dtype, stride: int) -> torch.Tensor:
    """[W, M, width] view with `stride` elements between destinations, as a fan-out view of the heap."""
    return torch.zeros(W * stride, dtype=dtype).as_strided((W, M, width), (stride, width, 1))


@pytest.mark.parametrize("seed", range(24))
def test_native_kernels_equal_the_torch_path(seed: int) -> None:
    """send/expand/partial/total of csrc/onesided.cpp against onesided_plan.py, bit for bit, on the same
    heap-shaped tensors (the multi-rank suite runs both paths across processes)."""
    g, T, k, W, S = _shapes(seed)
    _compare_native(seed, g, T, k, W, S, H=7)


@pytest.mark.parametrize("seed", range(3))
def test_native_kernels_split_over_threads_give_the_same_bits(seed: int) -> None:
    """Rows enough for the kernels to split their copies and sums over intra-op threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _compare_native(seed, torch.Generator().manual_seed(seed), 700, 2 + seed % 2, 3, 4, H=1024)
    finally:
        torch.set_num_threads(threads)


def _compare_native(seed: int, g: torch.Generator, T: int, k: int, W: int, S: int, H: int) -> None:
    """One process stands in for the ranks: this rank's sends to every destination, read back as if they
    were every source's rows at one receiver. me: the rank whose own rows stay out of the blocks (send
    leaves its hidden rows unwritten, expand takes them from `hidden`, partial leaves its partial rows
    alone and total sums them itself); -1: every row through the blocks."""
    if not native.load():
        pytest.skip("the C++ dispatch kernels are not built here (no compiler?)")
    ops = torch.ops.moeserve_dispatch
    dtype = (torch.float32, torch.bfloat16, torch.float16)[seed % 3]
    w_dtype = (torch.float32, torch.bfloat16)[seed % 2]
    me = -1 if seed % 3 == 2 else seed % W
    M = max(T, 1)
    ids = torch.randint(-1, W * S, (T, k), generator=g).to(torch.int32 if seed % 4 == 1 else torch.int64)
    hidden = torch.randn(T, H, generator=g).to(dtype)
    weights = torch.rand(T, k, generator=g).to(w_dtype)
    fans = [_blocks(W, M, width, dt, M * width + 5) for width, dt in ((H, dtype), (k, torch.int8), (k, w_dtype))]
    fans[0].fill_(float("nan"))  # what this rank's own hidden rows keep: send leaves them alone
    counts, back_index, own = ops.send(hidden, ids, weights, S, *fans, me, NONE, NONE)
    plan = plan_fanout(ids, S, W, torch.int8)
    assert counts.tolist() == plan.send_counts
    assert torch.equal(back_index, position_index(plan.send_pos, plan.dest * M + plan.row, T, k, W * M))
    mine = plan.dest == me
    assert torch.equal(own, plan.token_idx[mine])
    sent = hidden[plan.token_idx]
    assert torch.equal(fans[0][plan.dest[~mine], plan.row[~mine]], sent[~mine])
    assert bool(fans[0][plan.dest[mine], plan.row[mine]].isnan().all())
    for fan, src in zip(fans[1:], (plan.local_slots, weights[plan.token_idx])):
        assert torch.equal(fan[plan.dest, plan.row], src)

    # the receiver: every destination's blocks are one rank's [W source, M, *] blocks here
    recv = plan.send_counts
    n = max(recv)
    rows_in, slots, w_in = (f.contiguous() for f in fans)
    rows, per_slot, offsets, term_index, row_weights = ops.expand(slots, rows_in, w_in, recv, S, me, hidden, own,
                                                                  NONE, NONE)
    R = rows.shape[0]
    # into a kept scratch buffer where it holds the rows (the same values), else a new tensor as above
    for spare, into_scratch in ((3, True), (0, True), (-1, False)):
        scratch = torch.full((max(0, R + spare), H), float("nan")).to(hidden.dtype)
        again = ops.expand(slots, rows_in, w_in, recv, S, me, hidden, own, NONE, scratch)
        assert (again[0].data_ptr() == scratch.data_ptr()) == (into_scratch and R > 0)
        for a, b in zip(again, (rows, per_slot, offsets, term_index, row_weights)):
            assert torch.equal(a, b)
    rows_in[plan.dest, plan.row] = sent  # the grid the torch path reads: every row through the blocks
    row_pos, ref_counts = expand_grid(slots[:, :n], recv, S)
    q = row_pos // k
    heap_rows = q + (q // n) * (M - n) if 0 < n < M else q
    assert torch.equal(per_slot, ref_counts) and torch.equal(offsets, torch.cumsum(ref_counts, 0).to(torch.int32))
    assert torch.equal(rows, rows_in.view(W * M, H)[heap_rows])
    assert torch.equal(term_index, position_index(row_pos, None, W * n, k, row_pos.shape[0]))
    assert torch.equal(row_weights, w_in[:, :n].reshape(-1)[row_pos])

    y = (rows.float() * 1.5 - 0.25).to(dtype)  # a stand-in expert output
    got = _blocks(W, max(n, 1), H, torch.float32, max(n, 1) * H + 3)[:, :n]
    got.fill_(float("nan"))  # what a stale row (past its source's count) keeps: partial leaves it alone
    ops.partial(y, row_weights, term_index, got, me)
    terms = torch.cat([y.float() * row_weights.float()[:, None], torch.zeros(1, H)])
    want = sum_in_j_order(terms, term_index).view(W, n, H)
    real = torch.arange(n)[None, :] < torch.tensor(recv)[:, None]  # [W, n]
    written = real & (torch.arange(W) != me)[:, None]
    assert torch.equal(got[written], want[written]) and bool(got[~written].isnan().all())

    # this rank's partial rows: random from the peers; its own (block me) as partial would have written them
    partials = torch.cat([torch.randn(W * M, H, generator=g), torch.zeros(1, H)])
    ref_rows = partials.clone()
    if me >= 0:
        ref_rows[me * M : me * M + recv[me]] = want[me, : recv[me]]
        partials[me * M : (me + 1) * M] = float("nan")  # never read: total sums them from y
    ref = sum_in_j_order(ref_rows, back_index).to(dtype)
    got_total = ops.total(partials, back_index, torch.empty(0, dtype=dtype), me * M, M, me * n, y, row_weights,
                          term_index, NONE, S, NONE, NONE, NONE, 0)  # no terms: every rank sent partials
    assert torch.equal(got_total, ref)


@pytest.mark.parametrize("seed", range(30))
def test_total_reads_expert_output_in_place_as_local_sums_it(seed: int) -> None:
    """Every destination publishes its expert output in place (publish: the output's offset in its region
    and the term index of each source's rows), or, on some seeds, only some do and the others send partial
    rows. Each source's total must equal `local` bit for bit where every destination reads in place, and
    otherwise the same mix summed in the same order in torch. One process plays W ranks."""
    if not native.load():
        pytest.skip("the C++ dispatch kernels are not built here (no compiler?)")
    ops = torch.ops.moeserve_dispatch
    g, _, k, W, S = _shapes(seed)
    dtype, w_dtype = (torch.float32, torch.bfloat16, torch.float16)[seed % 3], (torch.float32, torch.bfloat16)[seed % 2]
    H = 6
    tokens = [int(torch.randint(0, 9, (1,), generator=g)) for _ in range(W)]
    M = max(max(tokens), 1)
    ids = [torch.randint(-1, W * S, (T, k), generator=g) for T in tokens]
    ids = [i.to(torch.int32) if seed % 4 == 1 else i for i in ids]
    hidden = [torch.randn(T, H, generator=g).to(dtype) for T in tokens]
    weights = [torch.rand(T, k, generator=g).to(w_dtype) for T in tokens]
    in_place = [seed % 5 != 4 or d % 2 == 0 for d in range(W)]  # seed % 5 == 4: odd ranks send partials

    def expert(x: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        return (x.float() * (1 + 0.1 * slot[:, None]) - 0.01 * slot[:, None]).to(dtype)

    columns = ((H, dtype), (k, torch.int8), (k, w_dtype))
    fans = [[_blocks(W, M, width, dt, M * width + 3) for width, dt in columns] for _ in range(W)]  # [source]
    sends = [ops.send(hidden[s], ids[s], weights[s], S, *fans[s], -1, NONE, NONE) for s in range(W)]
    width, region_bytes = 1 + M * k, 4096
    regions = torch.full((W, region_bytes), 0xFF, dtype=torch.uint8)  # each rank's region (junk around the rows)
    terms = torch.full((W, W, width), -5, dtype=torch.int64)  # [source's region, expert rank d, 1 + M * k]
    # [source, W * M + 1, H]: each source's partial rows (the last zeros)
    partials = torch.cat([torch.full((W, W * M, H), float("nan")), torch.zeros(W, 1, H)], 1)
    for d in range(W):
        recv = [int(c) for c in (sends[s][0][d] for s in range(W))]
        n = max(recv)
        blocks = [torch.stack([fans[s][col][d] for s in range(W)]) for col in (1, 0, 2)]
        rows, per_slot, _, term_index, row_weights = ops.expand(*blocks, recv, S, -1, hidden[d], NONE, NONE, NONE)
        y = expert(rows, d * S + torch.repeat_interleave(torch.arange(S), per_slot))
        offset = 64 + 16 * d  # where d's experts wrote their output in its region
        regions[d, offset : offset + y.numel() * y.element_size()] = y.view(-1).view(torch.uint8)
        ops.publish(term_index, recv, n, terms[:, d], offset if in_place[d] else -1)
        assert terms[:, d, 0].tolist() == [offset if in_place[d] else -1] * W
        if not in_place[d] and n:
            out = torch.full((W, n, H), float("nan"))
            ops.partial(y, row_weights, term_index, out, -1)
            for s in range(W):
                partials[s, d * M : d * M + recv[s]] = out[s, : recv[s]]
    addresses = torch.tensor([regions[r].data_ptr() for r in range(W)], dtype=torch.int64)
    for s in range(W):
        back_index = sends[s][1]
        got = ops.total(partials[s], back_index, torch.empty(0, dtype=dtype), -1, 0, 0, NONE, NONE, NONE,
                        ids[s], S, weights[s], terms[s], addresses, region_bytes)
        if all(in_place):  # local's sum, bit for bit
            local = LocalDispatcher(W * S)
            batch, handle = local.dispatch(hidden[s], ids[s], weights[s])
            slot = torch.repeat_interleave(torch.arange(W * S), batch.counts)
            want = local.combine(expert(batch.hidden, slot), handle)
        else:  # the same fp32 operations in the same order, in torch
            acc = torch.zeros(tokens[s], H)
            for t in range(tokens[s]):
                seen = set()
                for j in range(k):
                    v = int(ids[s][t, j])
                    if v < 0:
                        continue
                    d = v // S
                    if in_place[d]:
                        acc[t] += expert(hidden[s][t : t + 1], torch.tensor([v])).float()[0] * weights[s][t, j].float()
                    elif d not in seen:
                        acc[t] += partials[s, int(back_index[t, j])]
                    seen.add(d)
            want = acc.to(dtype)
        assert torch.equal(got, want)
    terms[:, :, 0] = region_bytes - H * dtype.itemsize + 1  # an output that would end past its region
    for s in range(W):
        if bool((ids[s] >= 0).any()):  # a term to read: refused, not read
            with pytest.raises(RuntimeError, match="outside its rank's region"):
                ops.total(partials[s], sends[s][1], torch.empty(0, dtype=dtype), -1, 0, 0, NONE, NONE, NONE,
                          ids[s], S, weights[s], terms[s], addresses, region_bytes)


@pytest.mark.parametrize("seed", range(24))
def test_placed_calls_give_the_same_expert_batch(seed: int) -> None:
    """A placed call (every source writes its rows at their final ExpertBatch row, from every source's
    counts) gives every destination the ExpertBatch, term_index and row weights of the call through
    the blocks, bit for bit. One process plays W sources, each with its own routing."""
    if not native.load():
        pytest.skip("the C++ dispatch kernels are not built here (no compiler?)")
    ops = torch.ops.moeserve_dispatch
    g, _, k, W, S = _shapes(seed)
    dtype, H = (torch.float32, torch.bfloat16)[seed % 2], 5
    tokens = [int(torch.randint(0, 9, (1,), generator=g)) for _ in range(W)]
    M = max(max(tokens), 1)
    # every position on one slot where seed % 3 == 0, else random with dropped positions
    ids = [torch.full((T, k), seed % (W * S)) if seed % 3 == 0 else torch.randint(-1, W * S, (T, k), generator=g)
           for T in tokens]
    ids = [i.to(torch.int32) if seed % 2 else i for i in ids]
    hidden = [torch.randn(T, H, generator=g).to(dtype) for T in tokens]
    weights = [torch.rand(T, k, generator=g) for T in tokens]
    # each source's counts into every rank's counts at once (a [W, W * S] fan-out view per source)
    counts = torch.full((W, W, W * S), -7, dtype=torch.int64)  # [rank, source, (destination, slot)]
    for s in range(W):
        assert ops.route_counts(ids[s], S, counts[:, s], 0) == 1
    assert bool((counts == counts[0]).all())  # every rank holds every count
    c = counts[0].view(W, W, S)
    for s in range(W):
        assert torch.equal(c[s], torch.bincount(ids[s][ids[s] >= 0].long(), minlength=W * S).view(W, S))
    per_slot = c.sum(0)  # [destination, slot]
    placed_rows = torch.full((W, W * M * k, H), float("nan")).to(dtype)  # [destination, row, H]: room for any routing
    columns = ((H, dtype), (k, torch.int8), (k, torch.float32))
    fans = {mode: [[_blocks(W, M, width, dt, M * width + 3) for width, dt in columns] for _ in range(W)]
            for mode in ("blocks", "placed")}  # [source]: its fan-out views of hidden, slots, weights
    for s in range(W):
        start = per_slot.cumsum(1) - per_slot + c[:s].sum(0)  # slot-major, then source
        bad, got_start = ops.placed_start(c.contiguous(), s, W * M * k)
        assert torch.equal(got_start, start) and not bool(bad.any())
        if int(per_slot.sum(1).max()):  # one row less room than the fullest destination needs: not placed
            assert ops.placed_start(c.contiguous(), s, int(per_slot.sum(1).max()) - 1)[1].numel() == 0
        got = ops.send(hidden[s], ids[s], weights[s], S, *fans["placed"][s], s, start, placed_rows)
        want = ops.send(hidden[s], ids[s], weights[s], S, *fans["blocks"][s], -1, NONE, NONE)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    for d in range(W):
        recv = [int(((i >= 0) & (i // S == d)).any(dim=1).sum()) for i in ids]
        # destination d's region: [W source, M, width] blocks (slots, hidden, weights, as expand takes them)
        region = {mode: [torch.stack([f[s][col][d] for s in range(W)]) for col in (1, 0, 2)] for mode, f in fans.items()}
        want = ops.expand(*region["blocks"], recv, S, -1, hidden[d], NONE, NONE, NONE)
        got = ops.expand(*region["placed"], recv, S, -1, hidden[d], NONE, placed_rows[d], NONE)
        assert got[0].shape[0] == int(per_slot[d].sum())
        if got[0].numel():  # the ExpertBatch is where the senders put the rows
            assert got[0].data_ptr() == placed_rows[d].data_ptr()
        for a, b in zip(got, want):
            assert torch.equal(a, b)


def test_route_counts_flags_bad_routing_everywhere() -> None:
    """An id out of range (or a caller's error) writes -1s into every rank's counts: every rank raises."""
    if not native.load():
        pytest.skip("the C++ dispatch kernels are not built here (no compiler?)")
    ops = torch.ops.moeserve_dispatch
    counts = torch.zeros(3, 3 * 2, dtype=torch.int64)
    assert ops.route_counts(torch.tensor([[0, 6]]), 2, counts, 0) == 0
    assert bool((counts == -1).all())
    counts.zero_()
    assert ops.route_counts(torch.tensor([[0, 1]]), 2, counts, 1) == 0  # bad given: the ids are not read
    assert bool((counts == -1).all())
    every = torch.zeros(3, 3, 2, dtype=torch.int64)  # [source, destination, slot]: source 1 flagged
    every[1] = -1
    bad, start = ops.placed_start(every, 0, 100)
    assert bad.tolist() == [0, 1, 0] and start.numel() == 0
