"""The control messages between rank 0 and the other ranks (process_groups.broadcast_bytes and
gather_bytes) on a real gloo world: every length arrives whole, those that fit the fixed frame and
those that need a second message, from any rank and in any mix."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))
from spawn_world import run_world  # noqa: E402

from moeserve.engine.process_groups import HEAD_BYTES  # noqa: E402

LENGTHS = [0, 1, HEAD_BYTES - 1, HEAD_BYTES, HEAD_BYTES + 1, 3 * HEAD_BYTES + 5]


def _payload(rank: int, n: int) -> bytes:
    return bytes((rank * 31 + i * 7) % 256 for i in range(n))


def _exchange(rank: int, world: int) -> list:
    import torch.distributed as dist

    from moeserve.engine.process_groups import broadcast_bytes, gather_bytes

    seen = []
    for step, n in enumerate(LENGTHS):
        plan = broadcast_bytes(_payload(0, n) if rank == 0 else None, dist.group.WORLD)
        assert plan == _payload(0, n), (rank, n)
        # ranks send different lengths in one gather: some fit the frame, some do not
        mine = _payload(rank, LENGTHS[(step + rank) % len(LENGTHS)])
        got = gather_bytes(mine, dist.group.WORLD)
        seen.append(got)
    return seen


@pytest.mark.timeout(120)
def test_plans_and_results_of_every_length_arrive_whole():
    results = run_world(_exchange, world=3, timeout_s=90)
    for step, got in enumerate(results[0]):
        assert got == [_payload(r, LENGTHS[(step + r) % len(LENGTHS)]) for r in range(3)], step
    assert all(g is None for rank in results[1:] for g in rank)
