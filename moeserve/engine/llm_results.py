"""What LLM.generate and LLM.chat report: a progress bar over the prompts (vLLM's use_tqdm), vLLM's
CompletionOutput of each finished sample and vLLM's prompt_logprobs of each prompt."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from moeserve.engine.token_texts import TokenTexts
from moeserve.outputs import CompletionOutput, Logprob, RequestOutput, TokenLogprob


class PromptsDone:
    """Counts a call's finished samples per prompt (owner); a prompt whose samples all finished
    advances the progress bar, as vLLM's bar counts prompts."""

    def __init__(self, samples: dict[str, int], bar: Any):
        self.left, self.bar = dict(samples), bar

    def finished(self, request_id: str) -> None:
        owner = request_id.rsplit("-", 1)[0]
        self.left[owner] -= 1
        if self.left[owner] == 0 and self.bar is not None:
            self.bar.update(1)


@contextlib.contextmanager
def progress(use_tqdm: bool | Callable[..., Any], total: int) -> Iterator[Any]:
    """vLLM's use_tqdm: True draws a tqdm bar when tqdm is installed (no bar, no error, without it),
    False none, a callable is called as tqdm would be and its bar is used."""
    if callable(use_tqdm):
        make = use_tqdm
    elif not isinstance(use_tqdm, bool):
        raise TypeError(f"use_tqdm must be True, False or a callable that makes a progress bar, got {use_tqdm!r}")
    elif not use_tqdm:
        make = None
    else:
        try:
            from tqdm.auto import tqdm as make
        except ImportError:
            make = None
    if make is None:
        yield None
        return
    bar = make(total=total, desc="Processed prompts", dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()


def logprob_dict(token: int, entry: TokenLogprob, text: str | None, alternatives: list[str | None]) -> dict[int, Logprob]:
    """vLLM's {token id: Logprob} of one position: the chosen `token` (its `text`) first, with the rank
    the engine computed, then its top alternatives (their texts `alternatives`) ranked 1, 2, ... (a
    chosen token among them keeps its first place in the dict and takes its alternative's rank, as
    vLLM's dict does). Texts as vLLM shows them: engine/token_texts.py."""
    lp, top, rank = entry
    out = {token: Logprob(lp, rank, text)}
    out.update((t, Logprob(v, r, alt)) for r, ((t, v), alt) in enumerate(zip(top, alternatives), 1))
    return out


def prompt_logprobs(prompt: list[int], entries: list[TokenLogprob | None] | None,
                    tokenizer: Any) -> list[dict[int, Logprob] | None] | None:
    """vLLM's RequestOutput.prompt_logprobs of the engine's entries (RequestOutput.prompt_logprobs): None
    for the first prompt token, then per token {token id: Logprob} as a generated token's
    (`logprob_dict`), its decoded_token shown as the server's /v1/completions shows it."""
    if entries is None:
        return None
    positions = [(token, None, []) if e is None else (token, e[0], e[1]) for token, e in zip(prompt, entries)]
    texts = (TokenTexts(tokenizer).positions(positions) if tokenizer is not None
             else ((None, [None] * len(top)) for _, _, top in positions))
    return [None if e is None else logprob_dict(token, e, *text) for token, e, text in zip(prompt, entries, texts)]


def completion(index: int, out: RequestOutput, tokenizer: Any) -> CompletionOutput:
    """vLLM's CompletionOutput of one finished sample; its logprobs as vLLM's {token id: Logprob} dicts."""
    entries = None
    if out.logprobs is not None:
        positions = [(token, lp, top) for token, (lp, top, _) in zip(out.token_ids, out.logprobs)]
        texts = (TokenTexts(tokenizer).positions(positions) if tokenizer is not None
                 else ((None, [None] * len(top)) for _, _, top in positions))
        entries = [logprob_dict(token, entry, *text) for token, entry, text in zip(out.token_ids, out.logprobs, texts)]
    cumulative = None if out.logprobs is None else float(sum(entry[0] for entry in out.logprobs))
    return CompletionOutput(index=index, text=out.text, token_ids=list(out.token_ids), cumulative_logprob=cumulative,
                            logprobs=entries, finish_reason=out.finish_reason, stop_reason=out.stop_reason)
