"""The quantization a checkpoint declares (config.json `quantization_config`), and the reader it is
loaded through.

    check_quantization(fields)                       # start-up, on config.json alone (torch-free)
    reader = open_checkpoint(model_dir, hf_config, keep_fp8=kernels.fp8_block_weights)

No quantization_config: a plain `CheckpointReader`. `quant_method: "fp8"` with block scales
(`Fp8BlockQuant`): `Fp8CheckpointReader` (models/quant_fp8.py), which every architecture's loader
reads through unchanged. `quant_method: "mxfp4"` (gpt-oss's experts): a plain reader too, the
architecture's own expert loader reads the blocks and scales (models/gpt_oss_experts.py). A method or
variant moeserve does not load is a ConfigError with one line naming the field, before any rank starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moeserve.errors import ConfigError

if TYPE_CHECKING:
    from moeserve.models.checkpoint import CheckpointReader

LOADABLE_METHODS = ("fp8", "mxfp4")
# methods only some architectures' loaders read (their own tensors, not a reader-level format)
ARCHITECTURE_METHODS = {"mxfp4": ("GptOssForCausalLM",)}
E4M3_NAMES = ("e4m3", "float8_e4m3fn", "float8_e4m3")  # how releases spell `fmt` (the file's dtype is checked too)


@dataclass(frozen=True)
class Fp8BlockQuant:
    """quantization_config of an FP8 block-scaled checkpoint. block: (rows, cols) of one scale block
    (weight_block_size); unquantized: the module names the checkpoint says it left alone
    (modules_to_not_convert / ignored_layers; informative: which tensors are FP8 is read from the file)."""

    block: tuple[int, int]
    unquantized: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, quant: dict[str, Any]) -> Fp8BlockQuant:
        """quant: quantization_config with quant_method "fp8"; ConfigError naming what moeserve cannot load."""
        block = quant.get("weight_block_size")
        if block is None:
            raise ConfigError(
                "quantization_config: fp8 without weight_block_size (per-tensor scales) is not supported; "
                "moeserve loads block-scaled FP8 (weight_block_size [128, 128], weight_scale_inv per block)")
        if (not isinstance(block, (list, tuple)) or len(block) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            raise ConfigError(f"quantization_config.weight_block_size must be two positive integers, got {block!r}")
        fmt = quant.get("fmt", "e4m3")
        if fmt not in E4M3_NAMES:
            raise ConfigError(f"quantization_config.fmt {fmt!r} is not supported; FP8 weights must be e4m3")
        scheme = quant.get("activation_scheme", "dynamic")
        if scheme != "dynamic":
            raise ConfigError(f"quantization_config.activation_scheme {scheme!r} is not supported: "
                              "block-scaled FP8 checkpoints quantize activations dynamically")
        names = []
        for key in ("modules_to_not_convert", "ignored_layers"):
            value = quant.get(key) or []
            if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                raise ConfigError(f"quantization_config.{key} must be a list of module names, got {str(value)[:60]}")
            names += value
        return cls((int(block[0]), int(block[1])), tuple(names))


def quantization_config(hf_config: Any) -> dict[str, Any] | None:
    """config.json's quantization_config as a dict (a transformers config or a SimpleNamespace), or None."""
    quant = getattr(hf_config, "quantization_config", None)
    if not quant:
        return None
    if not isinstance(quant, dict):
        if hasattr(quant, "to_dict"):
            quant = quant.to_dict()
        elif hasattr(quant, "__dict__"):
            quant = dict(vars(quant))
        else:  # config.json's quantization_config is a string, a list, a number: vars() raised TypeError
            raise ConfigError(f"quantization_config must be an object (quant_method, ...), got {str(quant)[:60]}")
    return quant


def checkpoint_quantization(hf_config: Any) -> Fp8BlockQuant | None:
    """What the checkpoint's weights are quantized as (None: not quantized); ConfigError for a
    quantization moeserve does not load."""
    quant = quantization_config(hf_config)
    if quant is None:
        return None
    method = quant.get("quant_method")
    if method == "fp8":
        return Fp8BlockQuant.from_config(quant)
    if method in ARCHITECTURE_METHODS:
        architecture = (getattr(hf_config, "architectures", None) or [None])[0]
        if architecture in ARCHITECTURE_METHODS[method]:
            return None  # the architecture's loader reads it (no reader-level transform)
        raise ConfigError(f"quantization_config.quant_method {method!r} is loaded for "
                          f"{', '.join(ARCHITECTURE_METHODS[method])} only, not {architecture}")
    raise ConfigError(
        f"quantization_config.quant_method {method!r} is not supported; moeserve loads "
        f"{', '.join(LOADABLE_METHODS)} checkpoints (block-scaled FP8: weight_block_size, weight_scale_inv; MXFP4: "
        "gpt-oss's experts) and unquantized ones (bf16/fp16/fp32)")


def check_quantization(hf_config: Any) -> None:
    """ConfigError naming a quantization moeserve does not load (one line, before any rank starts)."""
    checkpoint_quantization(hf_config)


def open_checkpoint(model_dir: str | Path, hf_config: Any, keep_fp8: bool = False,
                    progress: bool = True) -> CheckpointReader:
    """The reader for `model_dir`. keep_fp8: the rank's kernel set runs FP8 block-scaled weights
    (KernelSet.fp8_block_weights), so layers may keep them; otherwise FP8 weights are dequantized."""
    quant = checkpoint_quantization(hf_config)
    if isinstance(quant, Fp8BlockQuant):
        from moeserve.models.quant_fp8 import Fp8CheckpointReader

        return Fp8CheckpointReader(model_dir, quant, keep_fp8, progress)
    from moeserve.models.checkpoint import CheckpointReader

    return CheckpointReader(model_dir, progress=progress)
