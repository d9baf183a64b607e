"""A packed linear split by output columns over threads (fp32 CPU), for decode-size GEMMs.

Why: at decode a dense GEMM has 1-64 rows, and oneDNN splits a GEMM over its rows, so a second
OpenMP thread does not help while streaming the weight is what costs (QKV, output projection and LM
head were ~21% of a serving step at concurrency 8, docs/performance.md). Cut into column blocks,
each packed on its own and run on torch's inter-op pool (as the expert loop is), the weight streams
on several cores.

Contract: the same bits as the unsplit packed GEMM. Each output column is the same dot product
whichever block holds it; that is checked per layer at start-up on random inputs at every row count
a split may serve, 1 to MAX_ROWS, with and without the bias (`SplitLinear.create` returns None where
any bit differs, and the layer stays unsplit), so SplitChooser may pick either way at any call. The
check also builds oneDNN's kernels for the blocks, as `gemm.warm_up` does for whole weights.
Cost: the blocks are one more packed copy of the weight, kept even where the chooser mostly runs
the whole weight (it keeps probing the split).

Shape legend: T rows, I in features, O out features, k blocks.
"""

from typing import List, Optional, Union

import torch

from moeserve.kernels.cpu import gemm
from moeserve.kernels.cpu.split_chooser import Scripted, SplitChooser, take

MIN_BLOCK = 128  # out features per block: below this the split's overhead outweighs the streaming
MAX_ROWS = 64  # decode sizes: larger calls (prefill) run whole; every row count up to this is checked


def _block(x: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    none: List[Optional[Union[float, int, complex]]] = []
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", none, "")


def _block_if_free(claims: torch.Tensor, i: int, x: torch.Tensor, packed: torch.Tensor,
                   bias: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    if not take(claims, i):
        return None
    return _block(x, packed, bias)


def _blocks(x: torch.Tensor, packed: List[torch.Tensor], biases: List[Optional[torch.Tensor]]) -> torch.Tensor:
    """Block 0 on this thread, the others forked; then this thread runs every forked block no
    thread has started (split_chooser.take) and waits for the rest; concatenated in column order
    -> [T, O]."""
    claims = torch.zeros(len(packed), dtype=torch.int8)
    futures = [torch.jit.fork(_block_if_free, claims, i, x, packed[i], biases[i]) for i in range(1, len(packed))]
    outs = [_block(x, packed[0], biases[0])]
    mine = [take(claims, i) for i in range(1, len(packed))]
    for i in range(1, len(packed)):
        out = _block(x, packed[i], biases[i]) if mine[i - 1] else torch.jit.wait(futures[i - 1])
        assert out is not None  # a fork that ran found its block untaken
        outs.append(out)
    return torch.cat(outs, -1)


_blocks_scripted = Scripted(_blocks, "the column-split linears")


class SplitLinear:
    """The column blocks of one packed weight [O, I], and the choice, per call, of whether to use them."""

    max_rows = MAX_ROWS  # larger calls run the whole weight (gemm.PackedWeight.matmul)

    def __init__(self, weight: torch.Tensor, blocks: int):
        O = weight.shape[0]
        self.bounds = [O * i // blocks for i in range(blocks + 1)]
        self.packed = [gemm.pack_weight(weight[lo:hi]) for lo, hi in zip(self.bounds, self.bounds[1:])]
        self.chooser = SplitChooser()

    @classmethod
    def create(cls, weight: torch.Tensor, bias: Optional[torch.Tensor], packed: torch.Tensor, threads: int):
        """A split of `weight` over up to `threads` blocks, or None: nothing to split (fp32 CPU
        packing off, one thread, too few columns) or the blocks would not give the same bits."""
        if bias is not None and not isinstance(bias, torch.Tensor):
            return None
        blocks = min(threads, weight.shape[0] // MIN_BLOCK)
        if blocks < 2:
            return None
        split = cls(weight, blocks)
        if any(p is None for p in split.packed):
            return None
        g = torch.Generator().manual_seed(0)
        with torch.inference_mode():
            for b in {id(bias): bias, id(None): None}.values():  # with the bias, and without (tp ranks > 0)
                for rows in range(1, MAX_ROWS + 1):
                    x = torch.randn(rows, weight.shape[1], generator=g)
                    if not torch.equal(split.run(x, b), gemm.linear(x, weight, b, packed)):
                        return None
        return split

    def run(self, x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """x [T, I] -> [T, O] through the blocks."""
        if bias is None:
            biases: List[Optional[torch.Tensor]] = [None] * len(self.packed)
        else:
            biases = [bias[lo:hi] for lo, hi in zip(self.bounds, self.bounds[1:])]
        return _blocks_scripted(x, self.packed, biases)
