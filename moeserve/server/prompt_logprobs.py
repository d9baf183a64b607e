"""vLLM's `prompt_logprobs` request field: its checks, what the engine is asked, and the response's shape.

Request: `prompt_logprobs: k` scores every prompt token after the first with its logprob given the
tokens before it, its rank and the k most likely tokens at that position (the raw model distribution:
no penalties, no temperature). As in vLLM: an integer, -1 meaning the whole vocabulary, at most
the server's --max-logprobs (default 20, vLLM's), and none with `stream: true`
unless it is 0 (a stream carries no prompt logprobs: vLLM accepts 0 there and returns nothing).
Implied: a completion's `echo` with `logprobs: k`, and a chat's `echo` with `top_logprobs: k`, ask
for k (vLLM's defaults when the field is absent).

Response (vLLM's shape): a list with one entry per prompt token, null for the first, else
{token id: {"logprob", "rank", "decoded_token"}} holding the prompt token itself (first, with its rank
in the vocabulary, computed by the engine) and its top k alternatives (ranks 1..k). JSON keys are
strings; -inf reads as -9999.0, as vLLM clamps it. Completions put it on every choice, a chat at the
response's top level.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from moeserve.server import common
from moeserve.server.api_errors import bad_request
from moeserve.server.common import ServerState

def check(req: Any, state: ServerState) -> None:
    """400s naming prompt_logprobs: a negative count other than -1, more than the server returns
    (--max-logprobs), or a count with `stream: true`. -1 is replaced by the vocabulary's size."""
    k = req.prompt_logprobs = common.resolve_logprobs(state, req.prompt_logprobs, "prompt_logprobs")
    if k is None:
        return
    if req.stream and k > 0:
        raise bad_request("prompt_logprobs are not available with stream: true (as in vLLM); send the request "
                          "without stream, or prompt_logprobs 0", param="prompt_logprobs")


def wanted(req: Any, implied: int | None) -> int | None:
    """The engine's SamplingParams.prompt_logprobs: the field's value, else `implied` (echo's), as vLLM
    chooses. A stream returns none but an echo's, so without one it asks for none (its 0 would only
    cost the prefix cache)."""
    if req.prompt_logprobs is None:
        return implied
    return None if req.stream and implied is None else req.prompt_logprobs


def returned(req: Any, implied: int | None) -> bool:
    """Whether the response carries `prompt_logprobs` (a non-streaming request that asked, or echo's)."""
    return not req.stream and wanted(req, implied) is not None


def to_json(state: ServerState, entries: Sequence[tuple[int, Any, Any, Any]] | None) -> list[dict[str, Any] | None] | None:
    """vLLM's prompt_logprobs of a choice's (token, logprob, top, rank) entries (Choice.prompt_logprobs);
    decoded_token as vLLM shows it (engine/token_texts.py)."""
    if entries is None:
        return None
    texts = state.token_texts.positions(entries) if state.tokenizer is not None else _no_texts(entries)

    def item(lp: float, rank: int, text: str | None) -> dict[str, Any]:
        return {"logprob": common.json_logprob(lp), "rank": rank, "decoded_token": text}

    out: list[dict[str, Any] | None] = []
    for (token, lp, top, rank), (text, alternatives) in zip(entries, texts):
        if lp is None:
            out.append(None)
            continue
        position = {str(token): item(lp, rank, text)}
        # the prompt token stays first; among the alternatives it takes its place's rank, as vLLM's dict does
        position.update((str(t), item(v, r, alt)) for r, ((t, v), alt) in enumerate(zip(top, alternatives), 1))
        out.append(position)
    return out


def _no_texts(entries: Sequence[tuple[int, Any, Any, Any]]) -> Iterator[tuple[None, list[None]]]:
    """Without a tokenizer a decoded_token is null, as in vLLM."""
    return ((None, [None] * len(top or ())) for _, _, top, _ in entries)
