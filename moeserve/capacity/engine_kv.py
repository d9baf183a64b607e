"""The KV cache format each serving engine runs a checkpoint in with its KV flag at the default ("auto"),
read from the engines' own source (docs/capacity.md, "Formats from the checkpoint").

A checkpoint may declare a quantized KV cache: ModelOpt as `kv_cache_quant_algo` (hf_quant_config.json,
or config.json's flat `quantization_config`, where newer exports write `kv_cache_scheme`), llm-compressor
(compressed-tensors) as `kv_cache_scheme`. Whether "auto" follows that declaration differs by engine:

- TensorRT-LLM: always. `kv_cache_config.dtype` "auto" keeps the checkpoint's `kv_cache_quant_algo` (FP8 or
  NVFP4): NVIDIA/TensorRT-LLM tensorrt_llm/_torch/pyexecutor/model_loader.py, validate_and_set_kv_cache_quant
  ("KV cache quantization set to "auto". Using checkpoint KV quantization."), commit b51992a3315; the
  ModelOpt field is read in tensorrt_llm/llmapi/llm_utils.py (ModelLoader._update_from_hf_quant_config,
  commit 7b437aaa73b) and compressed-tensors' `kv_cache_scheme` float 8 becomes FP8 in
  tensorrt_llm/models/quant_config_utils.py (update_quant_config_from_compressed_tensors, commit 2a26169d0b2).
- vLLM: ModelOpt FP8 only, and compressed-tensors on GQA attention. `--kv-cache-dtype auto` is resolved by
  resolve_kv_cache_dtype_string / get_kv_cache_quant_algo_string (vllm/utils/torch_utils.py, commit
  959009b402c; merged in vllm-project/vllm#30785, December 2025): a quant_method starting "modelopt" with
  kv_cache_quant_algo FP8 (or a static float-8 kv_cache_scheme) runs fp8_e4m3; any other algorithm (NVFP4)
  falls back to the model dtype (MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP holds "fp8" only). A quant config with
  a `kv_cache_scheme` (compressed-tensors) forces cache_dtype "fp8" in the GQA `Attention` layer
  (vllm/model_executor/layers/attention/attention.py, "llm-compressor mdls need to set cache_dtype to
  "fp8" manually", commit 71169c16e98); `MLAAttention` (mla_attention.py, commit 90b0a26e0e1) has no such
  override, so an MLA model keeps the model dtype there.
- SGLang: ModelOpt FP8 only. `--kv-cache-dtype auto` becomes fp8_e4m3 when the quant config's
  `kv_cache_quant_algo` is "FP8", else the model dtype (ModelRunner.configure_kv_cache_dtype,
  python/sglang/srt/model_executor/model_runner.py); ModelOptFp8Config / ModelOptFp4Config set it from
  hf_quant_config.json or config.json (python/sglang/srt/layers/quantization/modelopt_quant.py, commit
  faeb96856c4); CompressedTensorsConfig has no kv_cache_quant_algo (compressed_tensors.py, commit
  b5535699b73), so a compressed-tensors checkpoint runs the model dtype unless --kv-cache-dtype is given
  (as sgl-project/sglang#4743's review says).

- ATOM (AMD's engine, ROCm only): never. `--kv_cache_dtype` takes bf16 or fp8 and defaults to bf16 whatever the
  checkpoint declares (atom/model_engine/arg_utils.py, EngineArgs.kv_cache_dtype = "bf16", commits 2f7130649 of
  January 2026 to ffdf3bb5d of August 2026); it is planned only on AMD cards.

An explicit KV flag wins in every engine, as --kv-dtype does here.
"""
from __future__ import annotations

ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM", "atom": "ATOM"}
# the setting that chooses each engine's KV cache format, and its default
KV_FLAGS = {"sglang": "SGLang's --kv-cache-dtype", "vllm": "vLLM's --kv-cache-dtype",
            "trtllm": "TensorRT-LLM's kv_cache_config.dtype", "atom": "ATOM's --kv_cache_dtype"}
KV_FLAG_DEFAULTS = {"sglang": "auto", "vllm": "auto", "trtllm": "auto", "atom": "bf16"}
PRODUCERS = ("modelopt", "compressed-tensors")
# engines that run on AMD Instinct cards only (ROCm), planned only on a profile whose card class is AMD's
ROCM_ONLY = ("atom",)
ROCM_CARD_CLASSES = ("cdna3", "cdna4")


def engines_for(card_class: str) -> tuple[str, ...]:
    """The engines configure plans for on a card of `card_class`."""
    return tuple(e for e in ENGINE_NAMES if card_class in ROCM_CARD_CLASSES or e not in ROCM_ONLY)


def default_kv(engine: str, declared: str | None, producer: str, mla: bool, act: str) -> str:
    """The KV format `engine` runs with its KV flag at its default, for a checkpoint declaring KV format `declared`
    ("fp8", "fp4"; None: none) through `producer` (one of PRODUCERS); `act` is the activation format (what
    "auto" falls back to) and `mla` whether the model's attention is MLA. A flag whose default is a format
    (KV_FLAG_DEFAULTS: ATOM's bf16) runs that format whatever the checkpoint declares."""
    assert engine in ENGINE_NAMES and (declared is None or producer in PRODUCERS), (engine, producer)
    if KV_FLAG_DEFAULTS[engine] != "auto":
        return KV_FLAG_DEFAULTS[engine]
    if declared is None or engine == "trtllm":
        return declared or act
    if engine == "vllm":
        if producer == "modelopt":
            return declared if declared == "fp8" else act
        return "fp8" if not mla else act
    return declared if producer == "modelopt" and declared == "fp8" else act


def default_kv_by_engine(declared: str | None, producer: str, mla: bool, act: str,
                         engines: tuple[str, ...] | None = None) -> dict[str, str]:
    """{engine: default_kv(engine, ...)} for `engines` (default: those of NVIDIA cards, every engine but ATOM)."""
    return {e: default_kv(e, declared, producer, mla, act) for e in (engines or engines_for("hopper"))}
