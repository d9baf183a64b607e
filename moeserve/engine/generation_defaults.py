"""The sampling defaults a checkpoint's generation_config.json sets (vLLM's `--generation-config auto`):
what `LLM.generate` / `LLM.chat` sample with when they are given no SamplingParams, as vLLM's do."""
from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

# generation_config.json's fields that are sampling parameters (max_new_tokens is max_tokens), as vLLM reads them
SAMPLING_FIELDS = ("repetition_penalty", "presence_penalty", "frequency_penalty", "temperature", "top_k", "top_p",
                   "min_p", "max_new_tokens")


def generation_defaults(model_dir: str) -> dict[str, Any]:
    """SamplingParams keywords from the checkpoint's generation config: its fields above that differ
    from transformers' defaults (every field it sets, in transformers 5); {} without one."""
    from transformers import GenerationConfig

    try:
        config = GenerationConfig.from_pretrained(model_dir).to_diff_dict()
    except OSError:  # no generation_config.json
        return {}
    out = {k: config[k] for k in SAMPLING_FIELDS if config.get(k) is not None}
    if "max_new_tokens" in out:
        out["max_tokens"] = out.pop("max_new_tokens")
    if out:
        log.info("sampling defaults from the checkpoint's generation_config.json: %s", out)
    return out
