"""put_kernels.py (the nvshmem backend's Triton kernels) under TRITON_INTERPRET=1, every rank of a world
in this one process over plain tensors as the regions: the meta words and flags each send raises, the
ExpertBatch each rank expands and the combine output, against `local` on the whole routing (the same
contract as the multi-rank suite, tests/dispatch/test_dispatch_multirank.py, which runs them across
processes), and bit for bit against the torch path's math (onesided_plan.py) at every intermediate:
back_index, term_index, row weights, the partial rows and the totals."""
from __future__ import annotations

import importlib.util

import pytest
import torch
from dispatch_cases import Case, check_rank, fake_expert, full_inputs, rank_slice

from moeserve.dispatch import ExpertBatch
from moeserve.dispatch.heap_layout import COMBINE, DISPATCH, META_WORDS, Layout
from moeserve.dispatch.onesided_plan import expand_grid, plan_fanout, position_index, sum_in_j_order
from moeserve.dispatch.wire import slot_dtype, weight_dtype

pytest.importorskip("triton")
BF16 = torch.bfloat16
CASES = [
    Case("w3-random", "nvshmem", 3, 2, 2, (3, 5, 4), seed=1),
    Case("w4-dropped-int32", "nvshmem", 4, 4, 4, (9, 0, 5, 2), routing="dropped", id_dtype=torch.int32, seed=2),
    Case("w2-bf16-hot-dup", "nvshmem", 2, 2, 3, (3, 4), routing="hot_dup", dtype=BF16, seed=3),
    Case("w3-zero-ranks", "nvshmem", 3, 3, 3, (0, 7, 0), seed=4),
    Case("w2-all-empty", "nvshmem", 2, 2, 2, (0, 0), seed=5),
    Case("w2-top1-bf16", "nvshmem", 2, 3, 1, (6, 2), dtype=BF16, seed=6),
    Case("w2-wide-slots", "nvshmem", 2, 130, 2, (5, 3), seed=7),  # int16 slot ids
    Case("w1-many-tokens", "nvshmem", 1, 4, 2, (37,), seed=8),  # several token blocks per destination
    Case("w2-fp16-distinct", "nvshmem", 2, 2, 2, (21, 18), routing="distinct", dtype=torch.float16, seed=9),
]


@pytest.fixture(scope="module")
def kernels():
    """A private copy of put_kernels decorated under TRITON_INTERPRET=1, whatever mode the rest of this
    process uses (an engine here with emulated nvshmem imports the module itself)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TRITON_INTERPRET", "1")
    # found, not imported: importing it here would fix the kernels of sys.modules' copy in this mode
    origin = importlib.util.find_spec("moeserve.dispatch.put_kernels").origin
    spec = importlib.util.spec_from_file_location("put_kernels_interpreted", origin)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    mp.undo()


class Regions:
    """A symmetric heap over tensors of this process: rank `rank`'s view of every region."""

    def __init__(self, regions: list[torch.Tensor], rank: int):
        self.regions, self.rank, self.world = regions, rank, len(regions)

    def region(self, rank: int) -> torch.Tensor:
        return self.regions[rank]


def _words(region: torch.Tensor, offset: int, count: int) -> list[int]:
    return region[offset : offset + 8 * count].view(torch.int64).tolist()


def _step(case: Case, kernels, epoch: int, bad_rank: int | None = None):
    W, S, k = case.world, case.slots_per_rank, case.top_k
    hidden, ids, weights = full_inputs(case)
    if bad_rank is not None:
        ids = ids.clone()
        ids[rank_slice(case, bad_rank).start, 0] = case.num_slots
    layout = Layout(W, max(max(case.tokens), 1), hidden.shape[1], k, case.dtype, slot_dtype(S), weight_dtype(weights))
    regions = [torch.zeros(layout.nbytes, dtype=torch.uint8) for _ in range(W)]
    heaps = [Regions(regions, r) for r in range(W)]
    puts = [kernels.TritonPuts() for _ in range(W)]
    p = epoch % 2
    tables = [puts[r].tables(heaps[r], layout, r)[p] for r in range(W)]
    mine = [layout.blocks(regions[r], p) for r in range(W)]
    backs = []
    for s in range(W):
        sl = rank_slice(case, s)
        backs.append(puts[s].send(heaps[s], tables[s], layout, hidden[sl], ids[sl], weights[sl], S, mine[s].slots,
                                  epoch, layout.flag_row(DISPATCH, p), False))
    for d in range(W):
        assert _words(regions[d], layout.flag_row(DISPATCH, p), W) == [epoch] * W, "a dispatch flag is not up"
    return layout, regions, heaps, puts, tables, mine, backs, ids


@pytest.mark.parametrize("prefix", [False, True], ids=["scan", "prefix"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_kernels_give_local_s_rows_and_sums(case: Case, prefix: bool, kernels, monkeypatch) -> None:
    """prefix: every batch takes the large-batch path (rows before each token block from _block_starts)."""
    if prefix:
        monkeypatch.setattr(kernels, "SCAN_BLOCKS", 0)
    W, S = case.world, case.slots_per_rank
    epoch, p = 5, 1
    layout, regions, heaps, puts, tables, mine, backs, ids = _step(case, kernels, epoch)
    M, k = layout.rows, case.top_k
    for s in range(W):  # back_index as the torch plan places each row
        plan = plan_fanout(ids[rank_slice(case, s)], S, W, layout.slot_dtype)
        want = position_index(plan.send_pos, plan.dest * M + plan.row, backs[s].shape[0], k, W * M)
        assert torch.equal(backs[s], want), f"back_index of rank {s}"
    batches, grids = [], []
    for d in range(W):
        meta = _words(regions[d], layout.meta_word(p), META_WORDS * W)
        counts, bad, terms = meta[0::META_WORDS], meta[1::META_WORDS], meta[2::META_WORDS]
        on_d = [(ids[rank_slice(case, s)].long() // S == d) & (ids[rank_slice(case, s)] >= 0) for s in range(W)]
        assert counts == [int(o.any(1).sum()) for o in on_d] and bad == [0] * W
        assert terms == [int(o.sum()) for o in on_d]
        rows, slot_counts, offsets, term_index, row_weights = puts[d].expand(tables[d], mine[d], S, max(counts),
                                                                            sum(terms))
        n = max(counts)
        row_pos, _ = expand_grid(mine[d].slots[:, :n], counts, S)
        assert torch.equal(term_index, position_index(row_pos, None, W * n, k, row_pos.shape[0])), "term_index"
        assert torch.equal(row_weights, mine[d].weights[:, :n].reshape(-1)[row_pos]), "row weights"
        batch = ExpertBatch(hidden=rows, offsets=offsets, counts=slot_counts)
        batches.append(batch)
        y = fake_expert(batch, d * S)
        puts[d].partial(heaps[d], tables[d], y, row_weights, term_index, n, epoch, layout.flag_row(COMBINE, p))
        terms_fp32 = torch.cat([y.float() * row_weights.float()[:, None], torch.zeros(1, y.shape[1])])
        grids.append((n, counts, sum_in_j_order(terms_fp32, term_index)))  # the torch path's partial rows
    for s in range(W):
        assert _words(regions[s], layout.flag_row(COMBINE, p), W) == [epoch] * W, "a combine flag is not up"
        block = layout.blocks(regions[s], p).partial  # [W expert rank, M, H]: the partials of s's rows
        for d, (n, counts, want) in enumerate(grids):
            assert torch.equal(block[d, : counts[s]], want[s * n : s * n + counts[s]]), f"partials {d} -> {s}"
        partials = layout.partial_rows(regions[s], p)
        out = puts[s].total(partials, backs[s], case.dtype)
        assert torch.equal(out, sum_in_j_order(partials, backs[s]).to(case.dtype)), f"total of rank {s}"
        check_rank(case, s, batches[s], out, "onesided")


def test_a_bad_id_sends_the_bad_flag_to_every_rank_and_the_scratch_is_clear_after(kernels) -> None:
    case = Case("w3-bad", "nvshmem", 3, 2, 2, (3, 2, 4), seed=11)
    layout, regions, heaps, puts, tables, *_ = _step(case, kernels, epoch=2, bad_rank=1)
    for d in range(3):
        meta = _words(regions[d], layout.meta_word(0), META_WORDS * 3)
        assert meta[1::META_WORDS] == [0, 1, 0] and meta[META_WORDS] == 0  # rank 1: bad, no rows
    for r in range(3):  # the last program of each destination cleared its scratch row
        assert not puts[r]._scratch[(torch.device("cpu"), DISPATCH)].any()


def test_the_host_s_refusal_sends_only_the_bad_flag(kernels) -> None:
    case = Case("w2-refused", "nvshmem", 2, 2, 2, (3, 2), seed=12)
    hidden, ids, weights = full_inputs(case)
    layout = Layout(2, 3, hidden.shape[1], 2, case.dtype, slot_dtype(2), weight_dtype(weights))
    regions = [torch.zeros(layout.nbytes, dtype=torch.uint8) for _ in range(2)]
    puts = kernels.TritonPuts()
    tables = puts.tables(Regions(regions, 0), layout, 0)[1]
    puts.send(Regions(regions, 0), tables, layout, hidden[:3], ids[:3], weights[:3], 2,
              layout.blocks(regions[0], 1).slots, 7, layout.flag_row(DISPATCH, 1), True)
    for d in range(2):
        assert _words(regions[d], layout.meta_word(1, 0), 3) == [0, 1, 0]
        assert _words(regions[d], layout.flag_row(DISPATCH, 1), 1) == [7]
        assert not layout.blocks(regions[d], 1).hidden.any(), "rows were written although the host refused"
