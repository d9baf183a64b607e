"""Dispatch backends by name (`--dispatch`): local, a2a, agrs, auto.

`auto` decides per call from values identical on every rank, never from the local batch, because
ranks that picked different backends would enter different collectives and hang:
    ep_size == 1                                              -> local
    max_tokens given, <= tiny_tokens, ep_size <= agrs_max_ranks -> agrs (tiny step: 2 collectives, not 3)
    otherwise                                                 -> a2a  (one row per (token, destination rank))
max_tokens is the per-step global bound the caller passes to `dispatch` (StepPlan.max_group_tokens).
The defaults come from benchmarks/dispatch_latency.py on gloo (docs/dispatch.md, "Choosing between
a2a and agrs"): agrs is 5-25% faster up to 32 tokens at ep 2, and slower everywhere else measured
(1.4-1.5x at ep 2 from 64 tokens of hidden 4096; 1.1-2.9x at ep 4).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from moeserve.config import DISPATCH_BACKENDS
from moeserve.dispatch.a2a import A2ADispatcher
from moeserve.dispatch.agrs import AgrsDispatcher, AgrsHandle
from moeserve.dispatch.base import Dispatcher, ExpertBatch, Handle
from moeserve.dispatch.local import LocalDispatcher
from moeserve.parallel_state import ParallelContext

DEFAULT_TINY_TOKENS = 32
DEFAULT_AGRS_MAX_RANKS = 2


class AutoDispatcher:
    """Owns an a2a and an agrs dispatcher and picks one per call (rule in the module docstring);
    combine follows the handle's type back to the backend that made it."""

    def __init__(
        self,
        num_slots: int,
        ctx: ParallelContext,
        tiny_tokens: int = DEFAULT_TINY_TOKENS,
        agrs_max_ranks: int = DEFAULT_AGRS_MAX_RANKS,
    ):
        self.a2a = A2ADispatcher(num_slots, ctx)
        self.agrs = AgrsDispatcher(num_slots, ctx)
        self.num_slots = num_slots
        self.num_local_slots = self.a2a.num_local_slots
        self.ep_size = ctx.ep_size
        self.tiny_tokens = tiny_tokens
        self.agrs_max_ranks = agrs_max_ranks

    def choose(self, top_k: int, max_tokens: int | None) -> Dispatcher:
        """The backend for one call; depends only on configuration and the global max_tokens.
        top_k is not used by the measured rule; it stays in the signature for rules that weigh it."""
        tiny = max_tokens is not None and max_tokens <= self.tiny_tokens
        return self.agrs if tiny and self.ep_size <= self.agrs_max_ranks else self.a2a

    def dispatch(
        self,
        hidden: torch.Tensor,
        topk_ids: torch.Tensor,
        topk_weights: torch.Tensor,
        max_tokens: int | None = None,
    ) -> tuple[ExpertBatch, Handle]:
        """hidden [T, H]; topk_ids [T, k] int (-1 = dropped); topk_weights [T, k]; max_tokens: global bound."""
        backend = self.choose(topk_ids.shape[1], max_tokens)
        return backend.dispatch(hidden, topk_ids, topk_weights, max_tokens=max_tokens)  # type: ignore[call-arg]

    def combine(self, expert_out: torch.Tensor, handle: Handle) -> torch.Tensor:
        backend: Dispatcher = self.agrs if isinstance(handle, AgrsHandle) else self.a2a
        return backend.combine(expert_out, handle)


def _local(num_slots: int, ctx: ParallelContext, **_: Any) -> Dispatcher:
    if ctx.ep_size != 1:
        raise ValueError(f"dispatch 'local' keeps every expert on one rank; ep_size is {ctx.ep_size}: use a2a, agrs or auto")
    return LocalDispatcher(num_slots)


def _multi_rank(cls: Callable[..., Dispatcher], name: str) -> Callable[..., Dispatcher]:
    def build(num_slots: int, ctx: ParallelContext, **opts: Any) -> Dispatcher:
        if ctx.ep_size == 1:
            raise ValueError(f"dispatch {name!r} needs ep_size > 1; with one expert rank use 'local' or 'auto'")
        return cls(num_slots, ctx, **opts)

    return build


def _auto(num_slots: int, ctx: ParallelContext, **opts: Any) -> Dispatcher:
    if ctx.ep_size == 1:
        return LocalDispatcher(num_slots)
    return AutoDispatcher(num_slots, ctx, **opts)


_BACKENDS: dict[str, Callable[..., Dispatcher]] = {
    "local": _local,
    "a2a": _multi_rank(A2ADispatcher, "a2a"),
    "agrs": _multi_rank(AgrsDispatcher, "agrs"),
    "auto": _auto,
}


assert set(_BACKENDS) == set(DISPATCH_BACKENDS), "config.DISPATCH_BACKENDS names the backends --dispatch accepts"


def dispatcher_names() -> list[str]:
    return list(_BACKENDS)


def make_dispatcher(name: str, num_slots: int, ctx: ParallelContext, **opts: Any) -> Dispatcher:
    """The backend called `name` for num_slots physical slots split evenly over ctx.ep_size ranks.

    opts go to the backend: a2a takes combine_dtype, auto takes tiny_tokens and agrs_max_ranks.
    """
    if name not in _BACKENDS:
        raise ValueError(f"unknown dispatch backend {name!r}; valid: {', '.join(_BACKENDS)}")
    return _BACKENDS[name](num_slots, ctx, **opts)
