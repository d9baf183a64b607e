"""The model's sizes against --tp / --ep, from config.json alone: no torch, no weights.

`EngineConfig.validate` runs it, so `moeserve serve` and `LLM(...)` refuse a layout the model cannot
split before any process or rank starts (in ~0.1 s, instead of from inside a rank 10-30 s later).
The rule is models/layout.py; every rank applies it again to its loaded config (`ModelRunner`), which
covers ranks started by torchrun or deepspeed.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from moeserve.config import EngineConfig
from moeserve.models.registry import check_layout


def config_fields(model: str | None) -> SimpleNamespace | None:
    """config.json of checkpoint directory `model` as attributes (None: the built-in model's, without
    building it), or None when there is none to read: loading then fails saying what is missing."""
    if model is None:
        from moeserve.engine.builtin_model import builtin_config_fields

        return SimpleNamespace(**builtin_config_fields())
    try:
        fields = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return SimpleNamespace(**fields) if isinstance(fields, dict) else None


def check_model_layout(config: EngineConfig) -> None:
    """Raises ConfigError naming each model size (config.json field and value) that does not split
    over --tp / --ep, and the flag to change."""
    fields = config_fields(config.model.model)
    if fields is not None:
        check_layout(fields, config.parallel.tp, config.parallel.ep)
