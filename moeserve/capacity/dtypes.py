"""Bytes per value of the number formats weights, KV cache and activations can take."""
from __future__ import annotations

# Block-scaled formats carry their scales: FP8 with one fp32 scale per 128x128 weight block (DeepSeek's
# format) adds 4/16384 byte; NVFP4 one fp8 scale per 16 values adds 1/16 byte.
BYTES = {"fp4": 0.5 + 1 / 16, "fp8": 1.0 + 4 / 16384, "bf16": 2.0, "fp16": 2.0, "fp32": 4.0}
# the tensor-core peak a GEMM in this weight format runs at (the activations are cast to match)
COMPUTE = {"fp4": "fp4", "fp8": "fp8", "bf16": "bf16", "fp16": "bf16", "fp32": "fp32"}
# the plain formats' torch names (config.json's torch_dtype, moeserve serve's dtype)
TORCH_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def nbytes(dtype: str) -> float:
    try:
        return BYTES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(BYTES)}") from None
