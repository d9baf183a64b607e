"""vLLM's prompt types (`vllm.inputs`), so `from moeserve.inputs import TokensPrompt` replaces vLLM's
import: plain dicts that LLM.generate takes as prompts."""
from __future__ import annotations

from typing import TypedDict


class TextPrompt(TypedDict):
    """A prompt as text, tokenized by the checkpoint's tokenizer."""

    prompt: str


class TokensPrompt(TypedDict):
    """A prompt as token ids."""

    prompt_token_ids: list[int]


PromptType = str | list[int] | TextPrompt | TokensPrompt
