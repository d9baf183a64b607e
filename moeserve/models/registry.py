"""Architecture name (config.json `architectures[0]`) -> model class, imported lazily."""
from __future__ import annotations

import importlib

_ARCHITECTURES: dict[str, str] = {
    "MixtralForCausalLM": "moeserve.models.mixtral:MixtralForCausalLM",
    "Qwen2MoeForCausalLM": "moeserve.models.qwen_moe:Qwen2MoeForCausalLM",
    "Qwen3MoeForCausalLM": "moeserve.models.qwen_moe:Qwen3MoeForCausalLM",
    "OlmoeForCausalLM": "moeserve.models.olmoe:OlmoeForCausalLM",
    "DeepseekV2ForCausalLM": "moeserve.models.deepseek:DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM": "moeserve.models.deepseek:DeepseekV3ForCausalLM",
}


def supported_architectures() -> list[str]:
    return sorted(_ARCHITECTURES)


def model_class(architecture: str) -> type:
    if architecture not in _ARCHITECTURES:
        raise ValueError(
            f"unsupported architecture {architecture!r}; moeserve supports: {', '.join(supported_architectures())}"
        )
    module, name = _ARCHITECTURES[architecture].split(":")
    return getattr(importlib.import_module(module), name)
