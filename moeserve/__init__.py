"""moeserve: serve mixture-of-experts language models with expert parallelism done right."""
from __future__ import annotations

__version__ = "0.1.0"

from moeserve.sampling_params import SamplingParams, StructuredOutputsParams

__all__ = ["LLM", "SamplingParams", "StructuredOutputsParams", "__version__"]


def __getattr__(name: str):
    # LLM pulls in torch and transformers; import it lazily so `moeserve --help` stays fast.
    if name == "LLM":
        from moeserve.engine.llm import LLM

        return LLM
    raise AttributeError(name)
