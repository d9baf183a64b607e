"""Architecture name (config.json `architectures[0]`) -> model class, imported lazily, and the sizes
a parallel layout cuts (models/layout.py, torch-free: read before any rank starts)."""
from __future__ import annotations

import difflib
import importlib
from typing import Any, Callable

from moeserve.errors import ConfigError
from moeserve.models import layout

# name -> ("module:Class", the architecture's cuts from its config, whether decoder layer i is MoE)
_ARCHITECTURES: dict[str, tuple[str, Callable[[Any], list[layout.Cut]], Callable[[Any, int], bool]]] = {
    "MixtralForCausalLM": ("moeserve.models.mixtral:MixtralForCausalLM", layout.mixtral_cuts, layout.every_layer),
    "Qwen2MoeForCausalLM": ("moeserve.models.qwen_moe:Qwen2MoeForCausalLM", layout.qwen2_moe_cuts, layout.qwen_moe_layer),
    "Qwen3MoeForCausalLM": ("moeserve.models.qwen_moe:Qwen3MoeForCausalLM", layout.qwen3_moe_cuts, layout.qwen_moe_layer),
    "OlmoeForCausalLM": ("moeserve.models.olmoe:OlmoeForCausalLM", layout.olmoe_cuts, layout.every_layer),
    "DeepseekV2ForCausalLM": ("moeserve.models.deepseek:DeepseekV2ForCausalLM", layout.deepseek_cuts,
                              layout.deepseek_moe_layer),
    "DeepseekV3ForCausalLM": ("moeserve.models.deepseek:DeepseekV3ForCausalLM", layout.deepseek_cuts,
                              layout.deepseek_moe_layer),
    "GptOssForCausalLM": ("moeserve.models.gpt_oss:GptOssForCausalLM", layout.gpt_oss_cuts, layout.every_layer),
    "Glm4MoeForCausalLM": ("moeserve.models.glm4_moe:Glm4MoeForCausalLM", layout.glm4_moe_cuts, layout.glm4_moe_layer),
    "MiniMaxM2ForCausalLM": ("moeserve.models.minimax_m2:MiniMaxM2ForCausalLM", layout.minimax_m2_cuts,
                             layout.every_layer),
}


def supported_architectures() -> list[str]:
    return sorted(_ARCHITECTURES)


def architecture_of(hf_config: Any) -> str | None:
    """config.json's `architectures[0]` (a transformers config or a SimpleNamespace of config.json)."""
    return (getattr(hf_config, "architectures", None) or [None])[0]


def nearest_supported(architecture: str) -> str:
    """The supported architecture whose name is most like `architecture` (case-insensitive): the
    longest common prefix (the family and its version), then difflib's ratio: 'Glm4MoeLiteForCausalLM'
    -> Glm4MoeForCausalLM, 'DeepseekV32ForCausalLM' -> DeepseekV3ForCausalLM, 'Qwen3NextForCausalLM' ->
    Qwen3MoeForCausalLM. A pointer for the user, not a promise that it loads."""
    name = architecture.lower()

    def likeness(supported: str) -> tuple[int, float]:
        other = supported.lower()
        prefix = next((i for i, (a, b) in enumerate(zip(name, other)) if a != b), min(len(name), len(other)))
        return prefix, difflib.SequenceMatcher(None, name, other).ratio()

    return max(supported_architectures(), key=likeness)


def _unsupported(architecture: str | None) -> str:
    named = architecture is not None and architecture.isidentifier()
    nearest = f"; the nearest by name is {nearest_supported(architecture)}" if named else ""
    supported = ", ".join(supported_architectures())
    return f"unsupported architecture {architecture!r}; moeserve supports: {supported}{nearest}"


def model_class(architecture: str) -> type:
    if architecture not in _ARCHITECTURES:
        raise ValueError(_unsupported(architecture))
    module, name = _ARCHITECTURES[architecture][0].split(":")
    return getattr(importlib.import_module(module), name)


def check_architecture(hf_config: Any) -> None:
    """ConfigError naming the supported architectures when config.json names another one (a config
    without `architectures` is left to the loader)."""
    names = getattr(hf_config, "architectures", None)
    if names is not None and (not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names)):
        raise ConfigError(f"config.json: architectures must be a list of class names, got {str(names)[:60]}")
    architecture = architecture_of(hf_config)
    if architecture is not None and architecture not in _ARCHITECTURES:
        raise ConfigError(_unsupported(architecture))


def check_layout(hf_config: Any, tp: int, ep: int, plan: Any = None, plan_name: str = "the placement plan") -> None:
    """Raises ConfigError naming each size of the model that does not split over --tp / --ep
    (models/layout.py), and an architecture moeserve does not serve, naming the ones it does (before any
    rank starts, so `--ep 4` on such a checkpoint fails as fast as `--ep 1`); with a placement `plan`,
    also where the plan does not fit the model, and its slots in place of the experts. A config
    without `architectures` is left to the loader."""
    architecture = architecture_of(hf_config)
    if architecture is None:
        return
    check_architecture(hf_config)
    _, cuts_of, is_moe = _ARCHITECTURES[architecture]
    cuts = cuts_of(hf_config)
    if plan is not None:
        layers = getattr(hf_config, "num_hidden_layers", None)
        moe_layers = sum(is_moe(hf_config, i) for i in range(layers)) if isinstance(layers, int) else None
        cuts = layout.with_plan(cuts, plan, ep, plan_name, moe_layers)
    layout.check_cuts(cuts, tp, ep)
