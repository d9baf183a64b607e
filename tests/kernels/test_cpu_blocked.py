"""Elementwise functions in row blocks (kernels/cpu/blocked.py): the same bits at any intra-op thread count,
for the functions the forward runs that way, and within rounding of the unblocked op."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from moeserve.kernels.cpu.blocked import ELEMENTWISE_GRAIN, by_rows

FUNCTIONS = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "sigmoid": torch.sigmoid,
    "cos": torch.cos,
    "sin": torch.sin,
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("shape", [(1001, 100), (700, 3, 33), (5, 20000), (3, 7)])
def test_row_blocks_give_the_same_bits_at_any_thread_count(name, shape):
    fn = FUNCTIONS[name]
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0)) * 6
    try:
        outs = []
        for threads in (1, 2, 3, 5):
            torch.set_num_threads(threads)
            outs.append(by_rows(fn, x))
        torch.set_num_threads(1)
        unblocked = fn(x)
    finally:
        torch.set_num_threads(1)
    for out in outs[1:]:
        assert torch.equal(out.view(torch.int32), outs[0].view(torch.int32)), name
    # a block's last elements may take the scalar path where the whole tensor took the vector one
    torch.testing.assert_close(outs[0], unblocked, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows", range(1, 9))
def test_attention_gives_the_same_bits_at_any_thread_count(rows):
    """torch's CPU flash attention differs between 1 and more threads at 1 or 3 query rows per
    (sequence, head); the cpu set's `thread_invariant_sdpa` pads those to an even count."""
    from moeserve.kernels.cpu.attention import thread_invariant_sdpa as sdpa

    gen = torch.Generator().manual_seed(rows)
    q, k, v = (torch.randn(3, 2, n, 32, generator=gen) for n in (rows, 48, 48))
    for bias in (torch.zeros(3, 1, 1, 48), torch.randn(3, 1, rows, 48, generator=gen)):
        try:
            outs = []
            for threads in (1, 2, 3):
                torch.set_num_threads(threads)
                outs.append(sdpa(q, k, v, bias, 0.2))
        finally:
            torch.set_num_threads(1)
        for out in outs[1:]:
            assert torch.equal(out, outs[0])
        reference = torch.softmax(q @ k.transpose(-1, -2) * 0.2 + bias, -1) @ v
        torch.testing.assert_close(outs[0], reference, rtol=1e-5, atol=1e-5)


def test_blocks_stay_below_the_grain_and_cover_every_row():
    seen = []

    def record(block: torch.Tensor) -> torch.Tensor:
        seen.append(block.numel())
        assert block.numel() < ELEMENTWISE_GRAIN
        return block

    x = torch.arange(1001 * 100, dtype=torch.float32).view(1001, 100)
    assert torch.equal(by_rows(record, x), x) and sum(seen) == x.numel() and len(seen) > 1
    seen.clear()
    wide = torch.arange(3 * (ELEMENTWISE_GRAIN + 5), dtype=torch.float32).view(3, -1)[:, 2:]  # rows above the grain
    assert torch.equal(by_rows(record, wide), wide)
    assert all(n < ELEMENTWISE_GRAIN for n in seen) and sum(seen) == wide.numel()
    assert by_rows(record, torch.zeros(0, 4)).shape == (0, 4)
