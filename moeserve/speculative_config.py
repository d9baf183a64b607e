"""`SpeculativeConfig`: vLLM's `--speculative-config` (a JSON object; a mapping in YAML and `LLM(...)`).

    --speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'
    --speculative-config '{"method": "mtp", "num_speculative_tokens": 2}'

Keys, as vLLM names them:
  method: "ngram" (prompt lookup: drafts copied from the sequence itself, no weights) or "mtp" (the
    checkpoint's multi-token-prediction layers; vLLM's older "deepseek_mtp" is the same method);
  num_speculative_tokens: draft tokens per step (>= 1); required for ngram, for mtp it defaults to
    the checkpoint's `num_nextn_predict_layers` (the one layer is chained for more);
  prompt_lookup_min / prompt_lookup_max: the n-gram lengths ngram matches (vLLM's defaults: both 5
    when neither is given, else the one given for both).
Other vLLM keys are refused with a line that says so; the config travels to rank processes as JSON.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from moeserve.errors import ConfigError

METHODS = ("ngram", "mtp")
METHOD_ALIASES = {"deepseek_mtp": "mtp", "[ngram]": "ngram"}
KEYS = ("method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max")
# vLLM keys moeserve knows and does not serve: each named in the refusal, not just "unknown"
UNSUPPORTED_KEYS = ("model", "draft_tensor_parallel_size", "quantization", "max_model_len", "revision",
                    "disable_by_batch_size", "disable_padded_drafter_batch", "speculative_token_tree",
                    "code_revision", "enforce_eager", "parallel_drafting")
MAX_SPECULATIVE_TOKENS = 16
NGRAM_DEFAULT_N = 5  # vLLM's prompt_lookup_min / max when neither is given
FLAG = "--speculative-config"


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str | None = None  # None: no speculative decoding
    num_speculative_tokens: int | None = None  # None with mtp: the checkpoint's MTP layer count
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None

    @property
    def enabled(self) -> bool:
        return self.method is not None

    @property
    def is_mtp(self) -> bool:
        return self.method == "mtp"

    @property
    def is_ngram(self) -> bool:
        return self.method == "ngram"

    def ngram_sizes(self) -> tuple[int, int]:
        """(min, max) n-gram length, with vLLM's defaults filled in."""
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is None and hi is None:
            return NGRAM_DEFAULT_N, NGRAM_DEFAULT_N
        return (lo if lo is not None else hi), (hi if hi is not None else lo)  # type: ignore[return-value]

    def num_drafts(self, mtp_layers: int = 0) -> int:
        """Draft tokens per step: the configured count, or (mtp) the checkpoint's MTP layers."""
        if not self.enabled:
            return 0
        return self.num_speculative_tokens if self.num_speculative_tokens is not None else mtp_layers

    @classmethod
    def from_value(cls, value: Any, origin: str = "--speculative-config") -> SpeculativeConfig:
        """The settings table's builder (settings.py): JSON text or a mapping, see `speculative_config`."""
        return speculative_config(value, origin)

    def validate(self, origin: str = FLAG) -> None:
        if self.method is None:
            if any(v is not None for v in (self.num_speculative_tokens, self.prompt_lookup_min, self.prompt_lookup_max)):
                raise ConfigError(f"{origin} needs a method: one of {', '.join(METHODS)}")
            return
        if self.method not in METHODS:
            raise ConfigError(f"{origin}: method {self.method!r} is not served by moeserve; choose one of {', '.join(METHODS)}")
        n = self.num_speculative_tokens
        if n is not None and not 1 <= n <= MAX_SPECULATIVE_TOKENS:
            raise ConfigError(f"{origin}: num_speculative_tokens must be in [1, {MAX_SPECULATIVE_TOKENS}], got {n}")
        if self.is_ngram:
            if n is None:
                raise ConfigError(f"{origin}: method ngram needs num_speculative_tokens (draft tokens per step, e.g. 3)")
            lo, hi = self.ngram_sizes()
            if lo < 1 or hi < 1:
                raise ConfigError(f"{origin}: prompt_lookup_min and prompt_lookup_max must be >= 1, got {lo} and {hi}")
            if lo > hi:
                raise ConfigError(f"{origin}: prompt_lookup_min {lo} is more than prompt_lookup_max {hi}")
        elif self.prompt_lookup_min is not None or self.prompt_lookup_max is not None:
            raise ConfigError(f"{origin}: prompt_lookup_min / prompt_lookup_max belong to method ngram, not {self.method}")


def speculative_config(value: Any, origin: str = FLAG) -> SpeculativeConfig:
    """A SpeculativeConfig from JSON text (the flag) or a mapping (YAML, `LLM(...)`), field-checked;
    ConfigError naming `origin` otherwise. None or an empty mapping: speculation off."""
    if value is None:
        return SpeculativeConfig()
    if isinstance(value, SpeculativeConfig):
        value.validate(origin)
        return value
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as e:
            raise ConfigError(f"{origin}: not a JSON object ({e.msg} at character {e.pos}): {value!r}") from None
    if not isinstance(value, Mapping):
        raise ConfigError(f"{origin}: speculative_config must be a JSON object / mapping, got {value!r}")
    refused = sorted(k for k in value if k in UNSUPPORTED_KEYS)
    if refused:
        raise ConfigError(f"{origin}: speculative_config key {refused[0]!r} is vLLM's and not supported by moeserve "
                          f"(drafts come from the checkpoint's MTP layers or from n-grams); keys: {', '.join(KEYS)}")
    unknown = sorted(k for k in value if k not in KEYS)
    if unknown:
        raise ConfigError(f"{origin}: unknown speculative_config keys {unknown}; valid keys: {', '.join(KEYS)}")
    method = value.get("method")
    if method is not None and not isinstance(method, str):
        raise ConfigError(f"{origin}: speculative_config method must be a string, got {method!r}")
    for key in KEYS[1:]:
        v = value.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise ConfigError(f"{origin}: speculative_config {key} must be an integer, got {v!r}")
    if method is None and value.get("num_speculative_tokens") is not None:
        raise ConfigError(f"{origin}: speculative_config needs a method: one of {', '.join(METHODS)}")
    config = SpeculativeConfig(METHOD_ALIASES.get(method, method) if method else None,
                               *(value.get(k) for k in KEYS[1:]))
    config.validate(origin)
    return config


def as_plain(config: SpeculativeConfig) -> dict[str, Any] | None:
    """The mapping `speculative_config` reads back (None when off): for YAML emitters and logs."""
    if not config.enabled:
        return None
    return {k: getattr(config, k) for k in KEYS if getattr(config, k) is not None}
