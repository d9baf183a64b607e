"""Bytes per value of the number formats weights, KV cache and activations can take."""
from __future__ import annotations

# Block-scaled formats carry their scales: FP8 with one fp32 scale per 128x128 weight block (DeepSeek's
# format) adds 4/16384 byte; NVFP4 one fp8 scale per 16 values adds 1/16 byte. int4 is W4A16 as Moonshot ships
# Kimi K2-Thinking and K2.5 (compressed-tensors pack-quantized: symmetric 4-bit integers in groups of 32 along
# the input, one BF16 scale a group, activations unquantized): 1/2 + 2/32 byte. mxfp4 is the OCP microscaling
# format gpt-oss ships its routed experts in (E2M1 values, one E8M0 byte scale per 32): 1/2 + 1/32 byte.
BYTES = {"fp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32, "fp8": 1.0 + 4 / 16384, "int4": 0.5 + 2 / 32, "bf16": 2.0,
         "fp16": 2.0, "fp32": 4.0}
# the tensor-core peak a GEMM in this weight format runs at (the activations are cast to match). W4A16 kernels
# (Marlin, Machete) dequantize the 4-bit weights in registers and multiply in BF16/FP16: their ideal is the
# roofline of 4-bit weight bytes against 16-bit tensor-core FLOPs, which Marlin reaches within a few percent up
# to 16-32 rows (IST-DASLab/marlin README: 'close to ideal (4x) speedups up to batchsizes of 16-32 tokens'); when
# compute-bound they run as BF16 weights would (Neural Magic's Machete, Hopper's W4A16 GEMM, 'matches
# compute-bound performance' of FP16; the MoE path's Marlin kernels publish no Hopper or Blackwell table: assumed).
# FP4 formats run at the FP4 peak on cards with FP4 tensor cores and at the BF16 peak on those without
# (Hardware.peak_flops: W4A16 there); but see W4A8.
COMPUTE = {"fp4": "fp4", "mxfp4": "fp4", "fp8": "fp8", "int4": "bf16", "bf16": "bf16", "fp16": "bf16", "fp32": "fp32"}
# formats whose kernels, on a card with FP4 tensor cores, quantize the activations to FP8 and multiply at the FP8
# peak (W4A8), not the FP4 one: MXFP4 (gpt-oss) takes MXFP8 activations there (TensorRT-LLM's gpt-oss README,
# 'MoE Support Matrix': Blackwell, activation mxfp8, weight mxfp4, for both its CUTLASS and TRTLLM MoE backends;
# FlashInfer's MXFP4 x MXFP8 MoE behind vLLM's VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8; AMD's gpt-oss on MI355X
# re-quantized by Quark as mxfp4_fp8). NVFP4 keeps the FP4 peak: its kernels quantize activations to NVFP4 (W4A4).
W4A8 = ("mxfp4",)
# formats only weights take: no engine keeps a KV cache, dispatches tokens or combines outputs in them
WEIGHT_ONLY = ("int4", "mxfp4")
# the plain formats' torch names (config.json's torch_dtype, moeserve serve's dtype)
TORCH_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def nbytes(dtype: str) -> float:
    try:
        return BYTES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(BYTES)}") from None
