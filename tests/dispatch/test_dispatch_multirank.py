"""Every multi-rank backend equals `local` run on the full routing in one process.

One gloo world of 4 ranks runs every case (ep groups of 2, 3 and 4 ranks are sub-groups of it), so
the processes start once; a hard timeout turns a hang into a failure. `nvshmem` runs its Triton
kernels under TRITON_INTERPRET=1 over the shared-memory heap (MOESERVE_NVSHMEM_EMULATE=1).
"""
from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
from dispatch_cases import Case, check_rank, combine_as_the_layer, full_inputs, in_place_expected, rank_slice
from spawn_world import run_world

from moeserve.dispatch import make_dispatcher, native, onesided
from moeserve.parallel_state import ParallelContext

pytestmark = pytest.mark.slow  # spawns ranks, servers or builds: left out of the quick run

BF16 = torch.bfloat16


def _cases() -> list[Case]:
    cases = []
    for backend in ("a2a", "agrs", "shm", "nvshmem", "a2a_ll"):
        for w in (2, 3, 4):
            cases += [
                Case(f"{backend}-w{w}-random", backend, w, 2, 2, tuple(range(3, 3 + w)), seed=w),
                Case(f"{backend}-w{w}-zero-ranks", backend, w, 3, 3, (0,) + (7,) * (w - 2) + (0,), seed=10 + w),
                Case(f"{backend}-w{w}-distinct", backend, w, 2, 2, (5,) * w, routing="distinct", seed=20 + w),
                Case(f"{backend}-w{w}-one-rank", backend, w, 3, 2, (4,) * w, routing="one_rank", seed=30 + w),
                Case(f"{backend}-w{w}-hot", backend, w, 2, 2, (6,) * w, routing="hot", seed=40 + w),
                Case(f"{backend}-w{w}-bf16", backend, w, 2, 3, (5,) * w, dtype=BF16, id_dtype=torch.int32, seed=50 + w),
                Case(f"{backend}-w{w}-bad-id", backend, w, 2, 2, (3,) * w, bad_rank=w - 1, seed=60 + w),
            ]
        cases += [
            Case(f"{backend}-w4-dropped-int32", backend, 4, 4, 4, (9, 0, 5, 2), routing="dropped", id_dtype=torch.int32),
            Case(f"{backend}-w4-hot-dup", backend, 4, 1, 3, (3, 4, 0, 2), routing="hot_dup", seed=1),
            Case(f"{backend}-w3-all-empty", backend, 3, 2, 2, (0, 0, 0), seed=2),
            Case(f"{backend}-w4-top1", backend, 4, 2, 1, (4, 1, 0, 6), seed=3),
            Case(f"{backend}-w2-bf16-dropped", backend, 2, 4, 2, (6, 1), routing="dropped", dtype=BF16, seed=4),
        ]
    cases += [
        Case("agrs-w4-no-max-tokens", "agrs", 4, 2, 2, (2, 5, 0, 3), pass_max_tokens=False, seed=5),
        Case("a2a_ll-w4-no-max-tokens", "a2a_ll", 4, 2, 2, (2, 5, 0, 3), pass_max_tokens=False, seed=5),
        Case("a2a_ll-w3-slack", "a2a_ll", 3, 2, 2, (2, 5, 1), max_tokens_slack=4, seed=6),
        Case("a2a_ll-w2-too-many-tokens", "a2a_ll", 2, 2, 2, (3, 3), max_tokens_slack=-1, seed=7),
        Case("a2a_ll-w4-ids-valid", "a2a_ll", 4, 2, 3, (4, 0, 6, 2), ids_valid=True, seed=31),
        Case("a2a_ll-w3-ids-valid-bf16", "a2a_ll", 3, 2, 2, (5, 1, 3), ids_valid=True, dtype=BF16, seed=32),
        Case("a2a_ll-w4-wide-slots", "a2a_ll", 4, 130, 2, (6, 3, 0, 5), seed=15),  # int16 slot ids
        Case("agrs-w3-slack", "agrs", 3, 2, 2, (2, 5, 1), max_tokens_slack=4, seed=6),
        Case("agrs-w2-too-many-tokens", "agrs", 2, 2, 2, (3, 3), max_tokens_slack=-1, seed=7),
        Case("auto-gloo-w4-tiny", "auto-gloo", 4, 2, 2, (1, 2, 0, 1), seed=8),
        Case("auto-gloo-w4-large", "auto-gloo", 4, 2, 2, (20, 17, 0, 25), seed=9),
        Case("auto-gloo-w2-top2", "auto-gloo", 2, 2, 2, (20, 30), seed=10),
        Case("auto-w3-one-host", "auto", 3, 2, 2, (4, 0, 9), seed=11),
    ]
    cases += [  # the shm backend's torch path (where its C++ kernels are not built)
        Case("shm-torch-w2-random", "shm-torch", 2, 2, 2, (3, 4), seed=16),
        Case("shm-torch-w4-dropped-int32", "shm-torch", 4, 4, 4, (9, 0, 5, 2), routing="dropped",
             id_dtype=torch.int32, seed=17),
        Case("shm-torch-w3-bf16-hot-dup", "shm-torch", 3, 1, 3, (3, 4, 0), routing="hot_dup", dtype=BF16, seed=18),
        Case("shm-torch-w3-zero-ranks", "shm-torch", 3, 3, 3, (0, 7, 0), seed=19),
        Case("shm-torch-w4-bad-id", "shm-torch", 4, 2, 2, (3,) * 4, bad_rank=2, seed=20),
    ]
    cases += [  # its copies one destination at a time (how it sends batches past onesided.FAN_BYTES)
        Case("shm-copies-w2-random", "shm-copies", 2, 2, 2, (3, 4), seed=21),
        Case("shm-copies-w4-dropped-int32", "shm-copies", 4, 4, 4, (9, 0, 5, 2), routing="dropped",
             id_dtype=torch.int32, seed=22),
        Case("shm-copies-w3-bf16-hot-dup", "shm-copies", 3, 1, 3, (3, 4, 0), routing="hot_dup", dtype=BF16, seed=23),
        Case("shm-copies-w3-zero-ranks", "shm-copies", 3, 3, 3, (0, 7, 0), seed=24),
    ]
    cases += [  # the C++ path with combine sending partial rows (read_in_place off), as past the rows block
        Case("shm-partials-w2-random", "shm-partials", 2, 2, 2, (3, 4), seed=25),
        Case("shm-partials-w4-dropped-int32", "shm-partials", 4, 4, 4, (9, 0, 5, 2), routing="dropped",
             id_dtype=torch.int32, seed=26),
        Case("shm-partials-w3-bf16-hot-dup", "shm-partials", 3, 1, 3, (3, 4, 0), routing="hot_dup", dtype=BF16,
             seed=27),
        Case("shm-partials-w4-zero-ranks", "shm-partials", 4, 3, 3, (0, 7, 7, 0), seed=28),
        Case("shm-partials-w3-placed", "shm-partials-placed", 3, 2, 3, (5, 2, 6), seed=29),
    ]
    cases += [  # placed calls: counts first, every row written at its final ExpertBatch row (placed_bytes)
        *(Case(f"shm-placed-w{w}-random", "shm-placed", w, 2, 2, tuple(range(3, 3 + w)), seed=70 + w) for w in (2, 3, 4)),
        Case("shm-placed-w4-zero-ranks", "shm-placed", 4, 3, 3, (0, 7, 7, 0), seed=74),
        Case("shm-placed-w3-all-empty", "shm-placed", 3, 2, 2, (0, 0, 0), seed=75),
        Case("shm-placed-w4-one-rank", "shm-placed", 4, 3, 2, (4,) * 4, routing="one_rank", seed=76),
        Case("shm-placed-w3-hot", "shm-placed", 3, 2, 2, (6,) * 3, routing="hot", seed=77),
        Case("shm-placed-w4-bf16-int32", "shm-placed", 4, 2, 3, (5, 2, 6, 1), dtype=BF16, id_dtype=torch.int32,
             seed=78),
        Case("shm-placed-w4-dropped-top1", "shm-placed", 4, 4, 1, (9, 0, 5, 2), routing="dropped", seed=79),
        Case("shm-placed-w4-wide-slots", "shm-placed", 4, 130, 2, (6, 3, 0, 5), seed=80),
        Case("shm-placed-w3-slack", "shm-placed", 3, 2, 2, (2, 5, 1), max_tokens_slack=4, seed=81),
        # 7 tokens x 3 positions on slot 0 = 21 rows, past the 3 x 4 of its block: through the blocks
        Case("shm-placed-w3-hot-dup-no-fit", "shm-placed", 3, 1, 3, (3, 4, 0), routing="hot_dup", seed=82),
        Case("shm-placed-w4-bad-id", "shm-placed", 4, 2, 2, (3,) * 4, bad_rank=1, seed=83),
        Case("shm-placed-w2-too-many-tokens", "shm-placed", 2, 2, 2, (3, 3), max_tokens_slack=-1, seed=84),
    ]
    for backend in ("shm", "nvshmem"):
        cases += [
            Case(f"{backend}-w4-no-max-tokens", backend, 4, 2, 2, (2, 5, 0, 3), pass_max_tokens=False, seed=12),
            Case(f"{backend}-w3-slack", backend, 3, 2, 2, (2, 5, 1), max_tokens_slack=4, seed=13),
            Case(f"{backend}-w2-too-many-tokens", backend, 2, 2, 2, (3, 3), max_tokens_slack=-1, seed=14),
            Case(f"{backend}-w4-wide-slots", backend, 4, 130, 2, (6, 3, 0, 5), seed=15),  # int16 slot ids
    ]
    return cases


CASES = _cases()


def _run_case(case: Case, rank: int, group: object) -> str | None:
    """None when this rank's result is right, else what went wrong."""
    ctx = ParallelContext(ep_size=case.world, ep_rank=rank, ep_group=group)
    if case.backend == "auto-gloo":
        disp = make_dispatcher("auto", case.num_slots, ctx, one_sided=False)
    elif case.backend in ("shm-placed", "shm-partials-placed"):
        disp = make_dispatcher("shm", case.num_slots, ctx)
        disp.placed_bytes = 0  # every call is placed
    elif case.backend in ("shm-torch", "shm-copies"):
        disp = make_dispatcher("shm", case.num_slots, ctx, native=False)
    else:
        disp = make_dispatcher(case.backend.removesuffix("-partials"), case.num_slots, ctx)
    if case.backend.startswith("shm-partials"):
        disp.read_in_place = False
    hidden, ids, weights = full_inputs(case)
    sl = rank_slice(case, rank)
    ids = ids[sl].clone()
    if case.bad_rank == rank and ids.numel():
        ids[0, 0] = case.num_slots
    max_tokens = max(case.tokens) + case.max_tokens_slack if case.pass_max_tokens else None
    expect_error = case.bad_rank is not None or case.max_tokens_slack < 0
    fan_bytes = onesided.FAN_BYTES
    if case.backend == "shm-copies":
        onesided.FAN_BYTES = -1  # every batch is "large": one copy per destination, no fan-out op
    try:
        try:
            batch, handle = disp.dispatch(hidden[sl], ids, weights[sl], max_tokens=max_tokens, ids_valid=case.ids_valid)
        except ValueError as e:
            return None if expect_error else f"unexpected error: {e}"
        if expect_error:
            return "expected every rank to raise on bad routing"
        out, backend, buffer = combine_as_the_layer(disp, batch, handle, rank * case.slots_per_rank)
    finally:
        onesided.FAN_BYTES = fan_bytes
    # the C++ path offers its buffer unless told not to or the ExpertBatch outgrew the rows block
    c_path = case.backend in ("shm", "shm-placed", "auto") and native.load()
    if c_path and buffer is None and batch.num_rows <= case.world * disp.layout.rows:
        return "shm's C++ path offered no buffer for the expert output"
    if (buffer is not None) != (disp.in_place_combines == 1 if hasattr(disp, "in_place_combines") else False):
        return "combine did not read the output in place from the buffer it offered"
    if case.backend.startswith("shm-partials") and disp.in_place_combines:
        return "read in place with read_in_place off"
    if case.backend == "shm-placed" and not native.load():
        return None if disp.placed_calls == 0 else "placed a call without the C++ kernels"
    if case.backend == "shm-placed" and disp.placed_calls != int("no-fit" not in case.name):
        return f"{disp.placed_calls} placed calls, expected {int('no-fit' not in case.name)}"
    # a rank whose ExpertBatch passes its rows block (W * M rows) sends partials; else none may
    if c_path and in_place_expected(case, disp) != (backend == "onesided-in-place"):
        return f"{backend}, where every rank reading in place is {in_place_expected(case, disp)}"
    if case.backend == "shm" and native.load() and not disp._native:
        return "shm stayed on torch ops although its C++ kernels are built"
    if case.backend in ("shm", "shm-torch", "shm-copies", "nvshmem", "auto") and not backend.startswith("onesided"):
        return f"{case.backend} dispatched with {backend}"
    try:
        check_rank(case, rank, batch, out, backend)
    except AssertionError as e:
        return f"{backend}: {e}"
    return None


def _all_cases(rank: int, world: int) -> dict[str, str | None]:
    os.environ.update(TRITON_INTERPRET="1", MOESERVE_NVSHMEM_EMULATE="1")  # before put_kernels is imported
    groups = {w: dist.new_group(list(range(w))) for w in (2, 3)}  # every rank takes part in new_group
    groups[4] = dist.group.WORLD
    results = {}
    for case in CASES:
        if rank < case.world:
            results[case.name] = _run_case(case, rank, groups[case.world])
    return results


@pytest.fixture(scope="module")
def world_results() -> list[dict[str, str | None]]:
    return run_world(_all_cases, world=4, timeout_s=600)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backend_matches_local(case: Case, world_results: list[dict[str, str | None]]) -> None:
    errors = {r: world_results[r][case.name] for r in range(case.world)}
    assert all(e is None for e in errors.values()), errors
