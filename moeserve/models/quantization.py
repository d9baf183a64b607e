"""The reader a checkpoint is loaded through, chosen by its config.json `quantization_config`.

    reader = open_checkpoint(model_dir, hf_config, keep_fp8=kernels.fp8_block_weights)

No quantization_config: a plain `CheckpointReader`. `quant_method: "fp8"` with block scales:
`Fp8CheckpointReader` (models/quant_fp8.py), which every architecture's loader reads through
unchanged. A method moeserve does not load is refused with one line naming it (before any weight is
read: `check_quantization` runs in the start-up checks on config.json alone).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from moeserve.errors import ConfigError
from moeserve.models.checkpoint import CheckpointError, CheckpointReader

LOADABLE_METHODS = ("fp8",)


def quantization_config(hf_config: Any) -> dict[str, Any] | None:
    """config.json's quantization_config as a dict (a transformers config or a SimpleNamespace), or None."""
    quant = getattr(hf_config, "quantization_config", None)
    if not quant:
        return None
    if not isinstance(quant, dict):
        quant = quant.to_dict() if hasattr(quant, "to_dict") else dict(vars(quant))
    return quant


def check_quantization(hf_config: Any) -> None:
    """ConfigError naming a quantization moeserve does not load (one line, before any rank starts)."""
    try:
        _reader_factory(hf_config)
    except CheckpointError as e:
        raise ConfigError(str(e)) from None


def _reader_factory(hf_config: Any) -> Callable[..., CheckpointReader]:
    quant = quantization_config(hf_config)
    if quant is None:
        return lambda model_dir, keep_fp8, progress: CheckpointReader(model_dir, progress=progress)
    method = quant.get("quant_method")
    if method == "fp8":
        from moeserve.models.quant_fp8 import Fp8BlockQuant, Fp8CheckpointReader

        fp8 = Fp8BlockQuant.from_config(quant)
        return lambda model_dir, keep_fp8, progress: Fp8CheckpointReader(model_dir, fp8, keep_fp8, progress)
    raise CheckpointError(
        f"quantization_config.quant_method {method!r} is not supported; moeserve loads "
        f"{', '.join(LOADABLE_METHODS)} checkpoints (block-scaled FP8: weight_block_size, weight_scale_inv) and "
        "unquantized ones (bf16/fp16/fp32)")


def open_checkpoint(model_dir: str | Path, hf_config: Any, keep_fp8: bool = False,
                    progress: bool = True) -> CheckpointReader:
    """The reader for `model_dir`. keep_fp8: the rank's kernel set runs FP8 block-scaled weights
    (KernelSet.fp8_block_weights), so layers may keep them; otherwise FP8 weights are dequantized."""
    return _reader_factory(hf_config)(model_dir, keep_fp8, progress)
