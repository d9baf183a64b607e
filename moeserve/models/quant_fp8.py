"""FP8 block-scaled checkpoints, as DeepSeek-V3/R1, Kimi K2, Qwen3-*-FP8, GLM-4.5-FP8 and MiniMax-M2
ship them: config.json `quantization_config = {"quant_method": "fp8", "weight_block_size": [128, 128],
"fmt": "e4m3", "activation_scheme": "dynamic"}`, and for each quantized linear weight

    {module}.weight            float8_e4m3fn [N, K]
    {module}.weight_scale_inv  float32 [ceil(N / 128), ceil(K / 128)]    W = weight * scale_inv per block

(the per-expert tensors included; models/quantization.py reads quantization_config). Modules the
checkpoint left unquantized (router gates, norms, embeddings, `lm_head`, `modules_to_not_convert` /
`ignored_layers`) are plain tensors on disk and are read as they are: whether a tensor is FP8 is read
from the file (its dtype and its `_scale_inv`), never guessed from its name.

`Fp8CheckpointReader` is a `CheckpointReader` whose `read` / `read_index` return any FP8 weight (or
any slice of one) dequantized: each element times its own block's scale, so a tensor-parallel cut
through the middle of a 128-block is exact. Every architecture gets this by loading through it
(models/quantization.py opens it). When the rank's kernel set runs FP8 weights itself
(`KernelSet.fp8_block_weights`), layers ask `read_fp8` first and keep the FP8 data and its scale
blocks (kernels/reference/fp8.py): a shard that starts on a block boundary keeps its blocks; one that
does not (`fp8_keepable` says no) is read dequantized, so a layout never changes what is computed;
`stats` counts both, and the rank logs them (`summary`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from moeserve.kernels.reference.fp8 import Fp8Block, blocks, expand_scale
from moeserve.models.checkpoint import CheckpointError, CheckpointReader

if TYPE_CHECKING:
    from moeserve.models.quantization import Fp8BlockQuant

SCALE_SUFFIX = "_scale_inv"  # {module}.weight -> {module}.weight_scale_inv
_FP8_ON_DISK = "F8_E4M3"


@dataclass
class Fp8Stats:
    """What loading did with the checkpoint's FP8 weights (counts of tensors read, this rank)."""

    kept: int = 0  # held FP8 with their scale blocks
    dequantized: int = 0  # read dequantized (no FP8 kernels, or a shard not in block form)


class Fp8CheckpointReader(CheckpointReader):
    """A CheckpointReader over an FP8 block-scaled checkpoint. keep: the rank's kernel set runs FP8
    weights (`read_fp8` hands out FP8 shards); otherwise every FP8 weight is read dequantized."""

    def __init__(self, model_dir: str | Path, quant: Fp8BlockQuant, keep: bool = False, progress: bool = True):
        super().__init__(model_dir, progress=progress)
        self.quant, self.keep = quant, keep
        self.stats = Fp8Stats()
        self._fp8: dict[str, bool] = {}

    # -- which tensors are FP8 ----------------------------------------------------------------------
    def is_fp8(self, name: str) -> bool:
        """`name` is an FP8 weight with its scale blocks on disk; CheckpointError for an FP8 tensor
        without them (nothing could dequantize it)."""
        if name not in self._fp8:
            fp8 = self.has(name) and self._slice(name).get_dtype() == _FP8_ON_DISK
            if fp8 and not self.has(name + SCALE_SUFFIX):
                raise CheckpointError(f"checkpoint {self.model_dir}: {name} is float8 but has no {name}{SCALE_SUFFIX}")
            self._fp8[name] = fp8
        return self._fp8[name]

    def _check_scale(self, name: str) -> tuple[int, ...]:
        shape, scale = self.shape(name), self.shape(name + SCALE_SUFFIX)
        bn, bk = self.quant.block
        want = (*shape[:-2], blocks(shape[-2], bn), blocks(shape[-1], bk))
        if len(shape) < 2 or scale != want:
            raise CheckpointError(f"checkpoint {self.model_dir}: {name}{SCALE_SUFFIX} has shape {scale}; {name} "
                                  f"{shape} in {bn}x{bk} blocks (weight_block_size) needs {want}")
        return shape

    # -- reads ----------------------------------------------------------------------------------------
    def read(self, name: str, shard_dim: int | None = None, start: int = 0, end: int | None = None) -> torch.Tensor:
        if not self.is_fp8(name):
            return super().read(name, shard_dim, start, end)
        index = [slice(None)] * len(self.shape(name))
        if shard_dim is not None:
            index[shard_dim] = slice(start, end)
        return self.read_index(name, tuple(index))

    def read_index(self, name: str, index: tuple) -> torch.Tensor:
        """tensor[index] (ints or step-1 slices), an FP8 weight dequantized to float32 element by element."""
        if not self.is_fp8(name):
            return super().read_index(name, index)
        shape = self._check_scale(name)
        index = tuple(index) + (slice(None),) * (len(shape) - len(index))
        data_index, scale_index, crops = list(index[:-2]), list(index[:-2]), []
        for item, size, block in zip(index[-2:], shape[-2:], self.quant.block):
            lo, hi = _bounds(item, size)
            first = lo // block
            data_index.append(slice(lo, hi))
            scale_index.append(slice(first, blocks(hi, block)))
            crops.append((lo - first * block, hi - lo, isinstance(item, int)))
        data = self._slice(name)[tuple(data_index)].float()
        scale = self._slice(name + SCALE_SUFFIX)[tuple(scale_index)].float()
        (r0, rows, _), (c0, cols, _) = crops
        full = expand_scale(scale, self.quant.block, (r0 + rows, c0 + cols))[..., r0:, c0:]
        out = (data * full)[..., 0 if crops[0][2] else slice(None), 0 if crops[1][2] else slice(None)]
        self.claim([name])
        self.stats.dequantized += 1
        return out

    @property
    def fp8_block(self) -> tuple[int, int]:
        return self.quant.block

    def fp8_keepable(self, name: str, shard_dim: int | None = None, start: int = 0) -> bool:
        """Whether `read_fp8` may hand out `name` (a shard from `start` along shard_dim: 0 rows, 1
        columns of the matrix): the rank's kernels keep FP8, the tensor is FP8, and the shard starts
        on a block boundary (one that starts inside a block is read dequantized instead)."""
        if not self.keep or not self.is_fp8(name):
            return False
        return shard_dim is None or start % self.quant.block[shard_dim] == 0

    def read_fp8(self, name: str, shard_dim: int | None = None, start: int = 0, end: int | None = None,
                 expert: int | None = None) -> Fp8Block:
        """The FP8 data and scale blocks of `name` ([start, end) along shard_dim, 0 rows or 1 columns
        of the matrix; `expert`: an index into a leading expert dim first). `fp8_keepable` said yes."""
        assert self.fp8_keepable(name, shard_dim, start), f"{name} cannot be kept in FP8 from {start}"
        shape = self._check_scale(name)
        index: list[Any] = [slice(None)] * len(shape)
        if expert is not None:
            index[0] = expert
        scale_index = list(index)
        if shard_dim is not None:
            dim, block = len(shape) - 2 + shard_dim, self.quant.block[shard_dim]
            end = shape[dim] if end is None else end
            index[dim], scale_index[dim] = slice(start, end), slice(start // block, blocks(end, block))
        data = self._slice(name)[tuple(index)]
        scale = self._slice(name + SCALE_SUFFIX)[tuple(scale_index)].float()
        self.claim([name])
        self.stats.kept += 1
        return Fp8Block(data, scale, self.quant.block)

    def claim(self, names: list[str]) -> None:
        """Claiming a weight claims its scale blocks too."""
        super().claim([*names, *(n + SCALE_SUFFIX for n in names if self.has(n + SCALE_SUFFIX))])

    def summary(self, dtype: torch.dtype) -> str:
        """One line on what became of the FP8 weights this rank read."""
        s, (bn, bk) = self.stats, self.quant.block
        if not self.keep:
            return (f"FP8 block-scaled checkpoint ({bn}x{bk} scale blocks): {s.dequantized} FP8 weights dequantized to "
                    f"{str(dtype).removeprefix('torch.')} at load (the kernel set has no FP8 kernels)")
        line = f"FP8 block-scaled checkpoint ({bn}x{bk} scale blocks): {s.kept} weights kept in FP8"
        if s.dequantized:
            line += (f", {s.dequantized} read dequantized to {str(dtype).removeprefix('torch.')} (shards that start "
                     "inside a scale block, fused parts not in whole blocks, layers that keep no FP8)")
        return line


def _bounds(item: Any, size: int) -> tuple[int, int]:
    """[lo, hi) of an int or a step-1 slice over `size` elements."""
    if isinstance(item, int):
        lo = item % size
        return lo, lo + 1
    lo, hi, step = item.indices(size)
    assert step == 1, "FP8 reads take step-1 slices"
    return lo, max(lo, hi)
