"""The model's sizes against --tp / --ep, from config.json alone: no torch, no weights.

engine/startup_checks.py runs it, so `moeserve serve` and `LLM(...)` refuse a layout the model cannot
split before any process or rank starts (in ~0.1 s, instead of from inside a rank 10-30 s later).
The rule is models/layout.py; every rank applies it again to its loaded config (`ModelRunner`), which
covers ranks started by torchrun or deepspeed.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from moeserve import envs
from moeserve.config import EngineConfig
from moeserve.errors import ConfigError
from moeserve.models.config_sizes import check_config_sizes
from moeserve.models.quantization import check_quantization
from moeserve.models.registry import check_architecture, check_layout
from moeserve.spec_decode.model_check import check_speculative


def config_fields(model: str | None) -> SimpleNamespace | None:
    """config.json of checkpoint directory `model` as attributes (None: the built-in model's, without
    building it), or None when there is none: loading then fails saying what is missing. One that
    cannot be read or parsed is a ConfigError naming the file (it used to pass, and kill the engine
    process after start-up)."""
    if model is None:
        from moeserve.engine.builtin_model import builtin_config_fields

        return SimpleNamespace(**builtin_config_fields())
    path = Path(model) / "config.json"
    try:
        fields = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    except ValueError as e:  # not UTF-8, or a number too long to convert
        raise ConfigError(f"{path} is not a JSON text: {' '.join(str(e).split())}") from None
    except RecursionError:  # json's own nesting limit
        raise ConfigError(f"{path} nests too deep to be a model's config") from None
    if not isinstance(fields, dict):
        raise ConfigError(f"{path} must hold a JSON object (a model's config), got a JSON {type(fields).__name__}")
    return SimpleNamespace(**fields)


def check_model_layout(config: EngineConfig) -> None:
    """Raises ConfigError naming a config.json size that is not an integer or disagrees with the
    checkpoint's tensors (models/config_sizes.py), a quantization moeserve does not load, each model
    size (config.json field and value) that does not split over --tp / --ep, and the flag to change; and a --placement plan that cannot be read or does not
    fit the model and layout (before, a missing file, or a plan for other ranks, failed inside the
    engine or every rank, with tracebacks)."""
    plan = load_plan(config.placement)
    fields = config_fields(config.model.model)
    if fields is not None:
        check_architecture(fields)  # an architecture moeserve does not serve is named before its files are read
        if config.model.model is not None:  # the sizes first: the layout check loops over num_hidden_layers
            check_config_sizes(config.model.model, fields)
        check_quantization(fields)
        check_layout(fields, config.parallel.tp, config.parallel.ep, plan, f"--placement {config.placement}")
        check_context_length(fields, config.model.max_model_len)
    check_speculative(config.speculative, fields)


ALLOW_LONG_ENV = envs.ALLOW_LONG_MAX_MODEL_LEN.name


def trained_context(fields) -> int | None:
    """The longest context the checkpoint's positions were trained (or rope-scaled) for:
    max_position_embeddings, or, with linear, dynamic or YaRN rope scaling that does not already
    count it, the original length times the factor. None when config.json does not say."""
    longest = getattr(fields, "max_position_embeddings", None)
    if not isinstance(longest, int) or longest <= 0:
        return None
    scaling = getattr(fields, "rope_scaling", None) or getattr(fields, "rope_parameters", None)
    if isinstance(scaling, dict) and isinstance(scaling.get("factor"), (int, float)) and scaling["factor"] > 1:
        kind = scaling.get("rope_type", scaling.get("type"))
        original = scaling.get("original_max_position_embeddings")
        if kind == "yarn" and isinstance(original, int) and original > 0:
            return max(longest, int(original * scaling["factor"]))
        if kind in ("linear", "dynamic") or (kind == "yarn" and original is None):
            return int(longest * scaling["factor"])
    return longest


def check_context_length(fields, max_model_len: int | None) -> None:
    """A --max-model-len past what the checkpoint's positions cover is refused (its outputs there
    would be silently wrong), unless MOESERVE_ALLOW_LONG_MAX_MODEL_LEN=1 says the user knows: then a
    warning. vLLM does the same (VLLM_ALLOW_LONG_MAX_MODEL_LEN); unchecked, 100000 tokens were
    served on a model trained for 4096 without a word."""
    import logging

    trained = trained_context(fields)
    if max_model_len is None or trained is None or max_model_len <= trained:
        return
    message = (f"--max-model-len {max_model_len} is longer than the {trained} positions the checkpoint covers "
               f"(config.json max_position_embeddings{' and rope scaling' if trained != fields.max_position_embeddings else ''})")
    if envs.ALLOW_LONG_MAX_MODEL_LEN.get():
        logging.getLogger(__name__).warning("%s; %s=1 allows it: outputs past %d tokens may be wrong",
                                            message, ALLOW_LONG_ENV, trained)
        return
    raise ConfigError(f"{message}: lower --max-model-len, or set {ALLOW_LONG_ENV}=1 if you know the model "
                      "handles longer contexts")


def load_plan(path: str | None):
    """The placement plan at `path` (None: no plan), or ConfigError saying why it cannot be used."""
    from moeserve.placement.plan import PlacementPlan, PlanFileError

    if path is None:
        return None
    try:
        return PlacementPlan.load(path)
    except OSError as e:
        raise ConfigError(f"cannot read --placement {path}: {e.strerror or e}") from None
    except PlanFileError as e:  # the field, bound or invariant that is broken, named
        raise ConfigError(f"--placement {path}: {e.detail}") from None
