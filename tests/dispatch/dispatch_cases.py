"""Dispatch cases for the multi-rank tests: routing generators, a fake expert, and the check
against `local` run on the full routing in one process (the oracle)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from moeserve.dispatch import ExpertBatch, LocalDispatcher

H = 32  # hidden size of every case


@dataclass(frozen=True)
class Case:
    name: str
    backend: str  # a2a | agrs | shm | shm-torch (no C++) | shm-copies (no fan-out) | nvshmem | auto | auto-gloo (auto without one-sided)
    world: int
    slots_per_rank: int
    top_k: int
    tokens: tuple[int, ...]  # tokens on each rank
    routing: str = "random"  # random | distinct | one_rank | hot | hot_dup | dropped
    dtype: torch.dtype = torch.float32
    id_dtype: torch.dtype = torch.int64
    pass_max_tokens: bool = True
    max_tokens_slack: int = 0  # max_tokens = max(tokens) + slack when passed
    bad_rank: int | None = None  # this rank routes to slot num_slots: every rank must raise
    ids_valid: bool = False  # dispatch is told every id is a slot (as the MoE layer tells it)
    seed: int = 0
    ranks_per_host: int = 0  # hier: ranks on each (simulated) host, node-major; 0 = one host

    @property
    def num_slots(self) -> int:
        return self.world * self.slots_per_rank


def full_inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """hidden [N, H], topk_ids [N, k] global slots, topk_weights [N, k] for all ranks' tokens, rank-major."""
    # N tokens over all ranks, k top-k, E slots
    g = torch.Generator().manual_seed(case.seed)
    N, k, E = sum(case.tokens), case.top_k, case.num_slots
    hidden = torch.randn(N, H, generator=g).to(case.dtype)
    weights = torch.rand(N, k, generator=g).to(case.dtype)
    scores = torch.rand(N, E, generator=g)
    if case.routing == "distinct":  # k slots on k different ranks (k <= world)
        ranks = torch.rand(N, case.world, generator=g).argsort(dim=1)[:, :k]
        ids = ranks * case.slots_per_rank + torch.randint(case.slots_per_rank, (N, k), generator=g)
    elif case.routing == "one_rank":  # all k slots of a token on one rank (k <= slots_per_rank)
        rank = torch.randint(case.world, (N, 1), generator=g)
        local = torch.rand(N, case.slots_per_rank, generator=g).argsort(dim=1)[:, :k]
        ids = rank * case.slots_per_rank + local
    else:
        ids = scores.topk(k, dim=1).indices
    if case.routing == "hot":  # every token's first choice is the last slot, the rest dropped
        ids[:, 0] = E - 1
        ids[:, 1:] = -1
    elif case.routing == "hot_dup":  # every position of every token names slot 0
        ids[:] = 0
    elif case.routing == "dropped":
        ids[torch.rand(N, k, generator=g) < 0.4] = -1
    return hidden, ids.to(case.id_dtype), weights


def rank_slice(case: Case, rank: int) -> slice:
    start = sum(case.tokens[:rank])
    return slice(start, start + case.tokens[rank])


def fake_expert(batch: ExpertBatch, first_slot: int) -> torch.Tensor:
    """A per-slot affine map y = x * (1 + 0.1 g) + 0.01 g (g = global slot), in the batch dtype. Rows
    past offsets[-1] (a fixed-capacity backend's padding) come out NaN: combine must never read them."""
    # R rows, S local slots, n rows of some slot
    slots = first_slot + torch.repeat_interleave(torch.arange(batch.counts.numel()), batch.counts)
    n = slots.shape[0]
    y = torch.full(batch.hidden.shape, float("nan"), dtype=torch.float32)
    y[:n] = batch.hidden[:n].float() * (1 + 0.1 * slots[:, None]) + 0.01 * slots[:, None]
    return y.to(batch.hidden.dtype)


def combine_as_the_layer(disp, batch: ExpertBatch, handle, first_slot: int):
    """combine of fake_expert(batch), written into the backend's buffer where it offers one, as the MoE
    layer does. Returns (output, the label check_rank takes, the buffer or None): "onesided-in-place"
    where every expert rank published its output in place (shm's C++ path), else the handle's kind."""
    y, buffer = fake_expert(batch, first_slot), disp.expert_output(batch)
    out = disp.combine(y if buffer is None else buffer.copy_(y), handle)
    backend = type(handle).__name__.removesuffix("Handle").lower()
    if backend == "onesided" and disp._native and bool((disp._terms[handle.epoch % 2][:, 0] >= 0).all()):
        backend = "onesided-in-place"
    return out, backend, buffer


def in_place_expected(case: Case, disp) -> bool:
    """Whether every expert rank must read in place: shm's C++ path with read_in_place on, and every
    rank's ExpertBatch (its top-k positions over the whole routing) within its rows block (W * M rows)."""
    if not (getattr(disp, "_native", False) and disp.read_in_place):
        return False
    ids = full_inputs(case)[1]
    per_rank = torch.bincount(ids[ids >= 0].long() // case.slots_per_rank, minlength=case.world)
    return bool((per_rank <= case.world * disp.layout.rows).all())


def exact_tokens(case: Case, ids: torch.Tensor, backend: str) -> torch.Tensor:
    """[N] bool: tokens whose combined row must equal local bit for bit (the fp32 sum is not
    regrouped; docs/dispatch.md). Other tokens must match to fp32 rounding."""
    # N tokens, k top-k, W ranks
    valid = ids >= 0
    ranks = torch.where(valid, ids.long() // case.slots_per_rank, case.world)
    per_rank = torch.zeros(ids.shape[0], case.world + 1, dtype=torch.long).scatter_add_(
        1, ranks, torch.ones_like(ranks)
    )[:, : case.world]
    contributors = (per_rank > 0).sum(1)
    singles = (per_rank <= 1).all(1)
    if backend.startswith("hier"):  # host partials (fp32) summed in order of each host's first position
        per_host = per_rank.view(ids.shape[0], case.world // case.ranks_per_host, case.ranks_per_host).sum(2)
        hosts, one_term_each = (per_host > 0).sum(1), (per_host <= 1).all(1)
        inside = torch.ones_like(singles) if backend == "hier-in-place" else (contributors <= 1) | singles
        return ((hosts <= 1) & inside) | one_term_each
    if backend == "agrs":  # fp32 reduce over ranks in the backend's order: two terms commute
        return (contributors <= 1) | (singles & (contributors <= 2))
    if backend == "onesided-in-place":  # every expert rank's output read where it lay: local's sum
        return torch.ones(ids.shape[0], dtype=torch.bool)
    if backend == "onesided":  # shm / nvshmem: fp32 partials whatever the payload dtype
        return (contributors <= 1) | singles
    if case.dtype == torch.bfloat16:  # a2a partial sums travel as bf16: one extra rounding each
        return contributors <= 1
    return (contributors <= 1) | singles


def check_rank(case: Case, rank: int, batch: ExpertBatch, out: torch.Tensor, backend: str) -> None:
    """Compare this rank's ExpertBatch and combine output with the single-process oracle."""
    hidden, ids, weights = full_inputs(case)
    oracle = LocalDispatcher(case.num_slots)
    o_batch, o_handle = oracle.dispatch(hidden, ids, weights)
    o_out = oracle.combine(fake_expert(o_batch, 0), o_handle)
    # Rows arrive in global token order (rank-major), so each local slot's rows equal the oracle's.
    S = case.slots_per_rank
    lo, hi = rank * S, (rank + 1) * S
    start = int(o_batch.counts[:lo].sum())
    n = int(o_batch.counts[lo:hi].sum())
    expect_rows = o_batch.hidden[start : start + n]
    assert torch.equal(batch.counts, o_batch.counts[lo:hi]), (batch.counts, o_batch.counts[lo:hi])
    assert torch.equal(batch.offsets, torch.cumsum(batch.counts, 0).to(torch.int32))
    assert batch.offsets.dtype == torch.int32 and batch.counts.dtype == torch.int64
    # a fixed-capacity backend (a2a_ll) pads the batch past offsets[-1]; the rest hold exactly the rows
    assert batch.num_rows == n or backend == "a2all", (batch.num_rows, n)
    assert torch.equal(batch.hidden[:n], expect_rows), "ExpertBatch rows differ from the oracle"

    sl = rank_slice(case, rank)
    want = o_out[sl]
    assert out.dtype == case.dtype and out.shape == want.shape, (out.dtype, out.shape, want.shape)
    exact = exact_tokens(case, ids[sl], backend)
    assert torch.equal(out[exact], want[exact]), "combine differs from local where it must be exact"
    terms = _term_magnitude(hidden[sl], ids[sl], weights[sl])  # [T, H] sum_j |w_j y_j|
    tol = 1e-6 if case.dtype == torch.float32 else 2e-2
    err = (out.float() - want.float()).abs()
    assert bool((err <= tol * terms + 1e-30).all()), f"max err {float(err.max())} beyond {tol} x terms"


def _term_magnitude(hidden: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """[T, H] fp32: sum over valid j of |w_j * expert_j(x)|, the scale of the fp32 rounding error."""
    valid = ids >= 0
    g = ids.clamp(min=0).float()[:, :, None]  # [T, k, 1]
    y = hidden.float()[:, None, :] * (1 + 0.1 * g) + 0.01 * g
    return (weights.float()[:, :, None] * y).abs().mul(valid[:, :, None]).sum(1)
