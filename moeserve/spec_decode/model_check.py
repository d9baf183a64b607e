"""What a checkpoint offers speculative decoding, from config.json alone (no torch), and the start-up
check of `--speculative-config` against it and the scheduler's budget (engine/startup_checks.py)."""
from __future__ import annotations

from typing import Any

from moeserve.errors import ConfigError
from moeserve.speculative_config import FLAG, SpeculativeConfig

# architectures whose multi-token-prediction layers moeserve runs (models/mtp.py), and the config.json
# keys that count them (GLM-4.5 releases say num_nextn_predict_layers too; some conversions num_mtp_layers)
MTP_ARCHITECTURES = ("DeepseekV3ForCausalLM", "Glm4MoeForCausalLM")
MTP_COUNT_KEYS = ("num_nextn_predict_layers", "num_mtp_layers")


def mtp_layer_count(fields: Any) -> int:
    """MTP layers the checkpoint's config.json declares (0: none)."""
    for key in MTP_COUNT_KEYS:
        value = getattr(fields, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 0


def check_speculative(spec: SpeculativeConfig, fields: Any | None) -> None:
    """ConfigError when the checkpoint cannot draft as asked. (A step's token budget below k + 1 is no
    error: drafts are cut to what a step leaves, core/spec_scheduling.py.)"""
    if not spec.enabled:
        return
    if spec.is_mtp and fields is not None:
        architecture = (getattr(fields, "architectures", None) or [None])[0]
        if architecture not in MTP_ARCHITECTURES:
            raise ConfigError(f"{FLAG} method mtp runs the MTP layers of {', '.join(MTP_ARCHITECTURES)} checkpoints; "
                              f"this one is {architecture}: use method ngram")
        if mtp_layer_count(fields) < 1:
            raise ConfigError(f"{FLAG} method mtp needs the checkpoint's MTP layers, and its config.json declares none "
                              f"(num_nextn_predict_layers): use method ngram, or a checkpoint that has them")
