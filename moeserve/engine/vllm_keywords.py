"""vLLM's `LLM(...)` keywords that moeserve's `LLM` takes besides its own settings (settings.py), so code
written for `vllm.LLM` runs with the import changed.

Each is translated to moeserve's settings, or accepted where its value is what moeserve does anyway;
a value moeserve cannot honour is a ConfigError that says what moeserve does instead, never ignored.
"""
from __future__ import annotations

import os
from typing import Any

from moeserve.errors import ConfigError

# vLLM's dtype names beside moeserve's (a torch.dtype is read by its name: torch.float16 -> "float16")
_DTYPES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

# keyword -> (the values moeserve accepts as they are, what moeserve does): accepted values change nothing
_ONLY = {
    "pipeline_parallel_size": ((1,), "moeserve has no pipeline parallelism: use tensor_parallel_size / ep"),
    "data_parallel_size": ((1,), "moeserve runs one engine per LLM; its attention groups come from tp and ep"),
    "tokenizer_mode": (("auto", "hf"), "moeserve loads the checkpoint's tokenizer with transformers"),
    "skip_tokenizer_init": ((False,), "moeserve always loads the checkpoint's tokenizer when it has one"),
    "revision": ((None, "main"), "moeserve loads the checkpoint as found (a directory or the cached snapshot)"),
    "load_format": (("auto", "safetensors"), "moeserve loads safetensors checkpoints"),
    "enable_chunked_prefill": ((True, None), "moeserve always splits long prompts into chunks of max_num_batched_tokens"),
    "distributed_executor_backend": ((None, "mp"), "moeserve starts its ranks as processes of its own"),
}
# keyword -> why any value is accepted
_ANY_BOOL = {
    # moeserve runs its own implementation of each architecture: a checkpoint's code is never run,
    # so permission to run it grants nothing
    "trust_remote_code": "moeserve never runs a checkpoint's code",
    "disable_log_stats": "moeserve's LLM logs no periodic stats",
}
VLLM_KEYWORDS = ("tensor_parallel_size", "enable_expert_parallel", "tokenizer", *_ONLY, *_ANY_BOOL)


def from_vllm(model: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` with vLLM's keywords replaced by moeserve's (tensor_parallel_size -> tp,
    enable_expert_parallel -> ep = tp, vLLM's dtype names) and the accepted ones dropped."""
    out = {k: v for k, v in settings.items() if k not in VLLM_KEYWORDS}
    if "tensor_parallel_size" in settings:
        tp = settings["tensor_parallel_size"]
        if "tp" in settings and settings["tp"] != tp:
            raise ConfigError(f"LLM(): tensor_parallel_size={tp!r} and tp={settings['tp']!r} disagree: pass one")
        out["tp"] = tp
    if settings.get("enable_expert_parallel") is not None:
        _check_bool(settings, "enable_expert_parallel")
        if settings["enable_expert_parallel"] and out.get("ep") is None:
            out["ep"] = out.get("tp") or 1  # vLLM's expert parallelism spans the tensor-parallel ranks
    if "dtype" in out:
        out["dtype"] = _dtype(out["dtype"])
    tokenizer = settings.get("tokenizer")
    if tokenizer is not None and (model is None or os.path.normpath(tokenizer) != os.path.normpath(model)):
        raise ConfigError(f"LLM(): tokenizer={tokenizer!r}: moeserve reads the tokenizer from the model ({model!r}); "
                          "leave tokenizer unset or equal to model")
    for key, (values, instead) in _ONLY.items():
        if key in settings and not any(settings[key] is v or settings[key] == v and type(settings[key]) is type(v)
                                       for v in values):
            raise ConfigError(f"LLM(): {key}={settings[key]!r} is not supported ({instead}); "
                              f"it takes {' or '.join(map(repr, values))}")
    for key in _ANY_BOOL:
        if key in settings:
            _check_bool(settings, key)
    return out


def _check_bool(settings: dict[str, Any], key: str) -> None:
    if not isinstance(settings[key], bool):
        raise ConfigError(f"LLM(): {key} must be True or False, got {settings[key]!r}")


def _dtype(value: Any) -> Any:
    """vLLM's dtype spellings (a torch.dtype, "half", "float", ...) as moeserve's names; others unchanged
    (the settings' check names the valid ones)."""
    if type(value).__name__ == "dtype" and type(value).__module__ == "torch":
        value = str(value).removeprefix("torch.")
    return _DTYPES.get(value, value) if isinstance(value, str) else value
