"""Dispatch backends by name (`--dispatch`): local, a2a, a2a_ll, agrs, shm, nvshmem, hier, auto.

`auto` decides once at construction, from facts every rank of the ep group has exchanged:
    ep_size == 1                                              -> local
    every rank on one host (same boot id and /dev/shm), x86-64, gloo -> shm (one-sided, onesided.py)
    several hosts of several ranks each (--nodes > 1: ctx.node_group), each host's ranks sharing one
    /dev/shm, x86-64, gloo                                     -> hier (hierarchical.py: shm inside each
                                                                  host, one exchange per host pair per rail)
    GPU ranks (NCCL) whose decode steps run as CUDA graphs    -> a2a_ll (fixed capacity, no host read:
                                                                 a2a_ll.py; `cuda_graphs=True`)
otherwise (several hosts of one rank each, or GPU ranks without graphs) it decides per call from values
identical on every rank, never from the local batch, because ranks that picked different backends would
enter different collectives and hang:
    max_tokens given, <= tiny_tokens, ep_size <= agrs_max_ranks -> agrs (tiny step: 2 collectives, not 3)
    otherwise                                                 -> a2a  (one row per (token, destination rank))
max_tokens is the per-step global bound the caller passes to `dispatch` (StepPlan.max_group_tokens).
The defaults come from benchmarks/dispatch_latency.py on gloo (docs/dispatch.md, "Choosing between
a2a and agrs"): agrs is 5-25% faster up to 32 tokens at ep 2, and slower everywhere else measured
(1.4-1.5x at ep 2 from 64 tokens of hidden 4096; 1.1-2.9x at ep 4).
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import platform
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from moeserve import envs
from moeserve.config import DISPATCH_BACKENDS, check_dispatch_host
from moeserve.dispatch.a2a import A2ADispatcher
from moeserve.dispatch.a2a_ll import A2ALLDispatcher
from moeserve.dispatch.agrs import AgrsDispatcher, AgrsHandle
from moeserve.dispatch.base import Dispatcher, ExpertBatch, Handle
from moeserve.dispatch.hierarchical import HierDispatcher, inner_context
from moeserve.dispatch.local import LocalDispatcher
from moeserve.dispatch.onesided import OneSidedDispatcher
from moeserve.parallel_state import ParallelContext

log = logging.getLogger("moeserve.dispatch")

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
        ids_valid: bool = False,
    ) -> tuple[ExpertBatch, Handle]:
        """hidden [T, H]; topk_ids [T, k] int (-1 = dropped); topk_weights [T, k]; max_tokens: global bound."""
        backend = self.choose(topk_ids.shape[1], max_tokens)
        return backend.dispatch(hidden, topk_ids, topk_weights, max_tokens=max_tokens,  # type: ignore[call-arg]
                                ids_valid=ids_valid)

    def expert_output(self, batch: ExpertBatch) -> None:
        """Neither gloo backend has a buffer of its own for the expert output."""
        return None

    def combine(self, expert_out: torch.Tensor, handle: Handle) -> torch.Tensor:
        backend: Dispatcher = self.agrs if isinstance(handle, AgrsHandle) else self.a2a
        return backend.combine(expert_out, handle)


@dataclass(frozen=True)
class StepBounds:
    """What the one-sided backends take from the engine: the step timeout (a peer's flag missing for
    longer is an error naming it) and the step's token bound (sizes the heap once)."""

    timeout_s: float = 60.0
    max_tokens: int = 0


def _local(num_slots: int, ctx: ParallelContext, bounds: StepBounds, **_: Any) -> Dispatcher:
    if ctx.ep_size != 1:
        raise ValueError(f"dispatch 'local' keeps every expert on one rank; ep_size is {ctx.ep_size}: use a2a, agrs or auto")
    return LocalDispatcher(num_slots)


def _multi_rank(cls: Callable[..., Dispatcher], name: str) -> Callable[..., Dispatcher]:
    def build(num_slots: int, ctx: ParallelContext, bounds: StepBounds, **opts: Any) -> Dispatcher:
        _need_ranks(name, ctx)
        return cls(num_slots, ctx, **opts)

    return build


def _need_ranks(name: str, ctx: ParallelContext) -> None:
    if ctx.ep_size == 1:
        raise ValueError(f"dispatch {name!r} needs ep_size > 1; with one expert rank use 'local' or 'auto'")


def _shm(num_slots: int, ctx: ParallelContext, bounds: StepBounds, native: bool = True,
         **_: Any) -> Dispatcher:
    from moeserve.dispatch.puts import TorchPuts
    from moeserve.dispatch.shm_heap import ShmHeap

    _need_ranks("shm", ctx)
    if not _store_order_is_program_order():
        raise ValueError(f"dispatch 'shm' relies on x86-64's store order; this is {platform.machine()}: use a2a")

    def heap(nbytes: int) -> ShmHeap:
        return ShmHeap.create(nbytes, ctx.ep_rank, ctx.ep_size, ctx.ep_group)

    return OneSidedDispatcher(num_slots, ctx, heap, TorchPuts(), bounds.timeout_s, bounds.max_tokens, native=native)


def _nvshmem(num_slots: int, ctx: ParallelContext, bounds: StepBounds, **_: Any) -> Dispatcher:
    _need_ranks("nvshmem", ctx)
    check_dispatch_host("nvshmem", 1)  # the one-line error where nvshmem4py is missing
    from moeserve.dispatch.put_kernels import TritonPuts

    if envs.NVSHMEM_EMULATE.get():
        from moeserve.dispatch.shm_heap import ShmHeap as heap_cls
        device = "cpu"
    else:
        from moeserve.dispatch.nvshmem_heap import NvshmemHeap as heap_cls  # type: ignore[assignment]
        device = "cuda"

    def heap(nbytes: int):
        return heap_cls.create(nbytes, ctx.ep_rank, ctx.ep_size, ctx.ep_group)

    return OneSidedDispatcher(num_slots, ctx, heap, TritonPuts(), bounds.timeout_s, bounds.max_tokens, device)


def _hier(num_slots: int, ctx: ParallelContext, bounds: StepBounds, native: bool = True, inner: str = "auto",
          **_: Any) -> Dispatcher:
    """Hierarchical: the host's one-sided dispatcher (shm; on GPU ranks nvshmem where nvshmem4py is
    installed; inner="nvshmem" forces it, emulated or not) under one exchange per host pair per rail."""
    _need_ranks("hier", ctx)
    if ctx.rail_group is None:
        raise ValueError("dispatch 'hier' needs an ep group over several nodes of several ranks each (--nodes > 1, "
                         "ctx.node_group and ctx.rail_group); on one node use 'shm', with one rank per node 'a2a'")
    hosts = ctx.ep_size // ctx.node_size
    # the host's heap holds a rank's own rows and one rail peer's per other host
    host_bounds = StepBounds(timeout_s=bounds.timeout_s, max_tokens=bounds.max_tokens * hosts)
    host_ctx = inner_context(ctx)
    if inner == "auto":
        inner = "nvshmem" if not _host_group(host_ctx) and importlib.util.find_spec("nvshmem") else "shm"
    if inner == "nvshmem":
        host = _nvshmem(num_slots, host_ctx, host_bounds)  # the same slots: S x hosts per rank of the host
    else:
        host = _shm(num_slots, host_ctx, host_bounds, native=native)
    if ctx.ep_rank == 0:
        log.info("hierarchical dispatch: %s inside each of %d hosts of %d ranks, one exchange per host pair on each "
                 "rail between them", inner, hosts, ctx.node_size)
    return HierDispatcher(num_slots, ctx, host)  # type: ignore[arg-type]


def _auto(num_slots: int, ctx: ParallelContext, bounds: StepBounds, one_sided: bool = True,
          cuda_graphs: bool = False, **opts: Any) -> Dispatcher:
    if ctx.ep_size == 1:
        return LocalDispatcher(num_slots)
    if one_sided and _host_group(ctx) and _store_order_is_program_order():
        keys = _host_keys(ctx)
        if all(key == keys[0] for key in keys):
            return _shm(num_slots, ctx, bounds)
        if _hosts_are_nodes(ctx, keys):
            return _hier(num_slots, ctx, bounds)
    if cuda_graphs and not _host_group(ctx):  # a2a, agrs and hier read counts back: they cannot be captured
        return A2ALLDispatcher(num_slots, ctx)
    return AutoDispatcher(num_slots, ctx, **opts)


def _host_group(ctx: ParallelContext) -> bool:
    """Whether the ep group moves host tensors (gloo, CPU ranks). GPU ranks may ask for shm (their rows
    are staged through the host heap), but `auto` keeps NCCL's collectives for them."""
    return dist.get_backend(ctx.ep_group) == "gloo"


def _store_order_is_program_order() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def _hosts_are_nodes(ctx: ParallelContext, keys: list[int]) -> bool:
    """Whether the ep group has hierarchical dispatch's groups and each node's ranks (node_size of
    them, node-major) share one host and /dev/shm: then each node's heap can be mapped by its ranks."""
    L = ctx.node_size
    if ctx.rail_group is None or L < 2:
        return False
    return all(keys[r] == keys[r - r % L] for r in range(len(keys)))


def _host_keys(ctx: ParallelContext) -> list[int]:
    """Every ep rank's hash of its boot id, host name and /dev/shm (a collective over the ep group)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        st = os.stat("/dev/shm")
        key = f"{boot}:{socket.gethostname()}:{st.st_dev}:{st.st_ino}"
    except OSError:
        key = f"no-shm:{os.getpid()}"  # unique: never matches a peer
    mine = torch.tensor([int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little", signed=True)])
    every = [torch.empty_like(mine) for _ in range(ctx.ep_size)]
    dist.all_gather(every, mine, group=ctx.ep_group)
    return [int(t) for t in every]


_BACKENDS: dict[str, Callable[..., Dispatcher]] = {
    "local": _local,
    "a2a": _multi_rank(A2ADispatcher, "a2a"),
    "a2a_ll": _multi_rank(A2ALLDispatcher, "a2a_ll"),
    "agrs": _multi_rank(AgrsDispatcher, "agrs"),
    "shm": _shm,
    "nvshmem": _nvshmem,
    "hier": _hier,
    "auto": _auto,
}


assert set(_BACKENDS) == set(DISPATCH_BACKENDS), "config.DISPATCH_BACKENDS names the backends --dispatch accepts"


def describe(name: str, dispatcher: Dispatcher, ctx: ParallelContext) -> str:
    """What `--dispatch name` built, in words, and for `auto` why (the start-up summary). Reads
    only this rank's facts: no collective."""
    if isinstance(dispatcher, LocalDispatcher):
        what = "local (one expert rank)" if ctx.tp_size == 1 else f"local (every expert split {ctx.tp_size} ways)"
    elif isinstance(dispatcher, OneSidedDispatcher):
        from moeserve.dispatch.puts import TorchPuts

        shm = isinstance(dispatcher.puts, TorchPuts)
        how = ("C++ kernels" if dispatcher.native else "torch ops") if shm else "Triton kernels"
        what = f"{'shm' if shm else 'nvshmem'}: one-sided, {how}"
    elif isinstance(dispatcher, HierDispatcher):
        what = f"hier: {describe('shm', dispatcher.inner, inner_context(ctx))} inside each host, the rails between hosts"
    elif isinstance(dispatcher, AutoDispatcher):
        agrs = dispatcher.ep_size <= dispatcher.agrs_max_ranks
        what = f"a2a, agrs for steps of <= {dispatcher.tiny_tokens} tokens" if agrs else "a2a"
    else:
        what = next((n for n, cls in (("a2a", A2ADispatcher), ("a2a_ll", A2ALLDispatcher), ("agrs", AgrsDispatcher))
                     if isinstance(dispatcher, cls)),
                    type(dispatcher).__name__)
    if name != "auto":
        return what
    if ctx.ep_size == 1:
        why = "one expert rank"
    elif isinstance(dispatcher, OneSidedDispatcher):
        why = "every rank on this host"
    elif isinstance(dispatcher, HierDispatcher):
        why = "several hosts of several ranks each"
    elif isinstance(dispatcher, A2ALLDispatcher):
        why = "GPU ranks whose decode steps run as CUDA graphs"
    elif not _host_group(ctx):
        why = "GPU ranks keep NCCL's collectives"
    elif not _store_order_is_program_order():
        why = f"shm needs x86-64's store order, this is {platform.machine()}"
    else:
        why = "the ranks span several hosts"
    return f"{what} (auto: {why})"


def dispatcher_names() -> list[str]:
    return list(_BACKENDS)


def make_dispatcher(
    name: str, num_slots: int, ctx: ParallelContext, bounds: StepBounds | None = None, **opts: Any
) -> Dispatcher:
    """The backend called `name` for num_slots physical slots split evenly over ctx.ep_size ranks.

    bounds: the step timeout and token bound (shm, nvshmem, and auto when it picks shm).
    opts go to the backend: a2a and a2a_ll take combine_dtype; auto takes tiny_tokens and agrs_max_ranks
    (its multi-host rule), one_sided=False (never shm or hier) and cuda_graphs=True (a2a_ll for GPU
    ranks, whose decode runs as CUDA graphs); other backends ignore cuda_graphs; shm and hier take
    native=False (torch ops only, not the C++ kernels of native.py); hier takes inner="shm"|"nvshmem"
    (the host's backend). shm, nvshmem, hier and auto (on one host, or picking hier) are collectives
    over ctx.ep_group (hier over its node and rail groups): every rank builds them together.
    """
    if name not in _BACKENDS:
        raise ValueError(f"unknown dispatch backend {name!r}; valid: {', '.join(_BACKENDS)}")
    graphs = opts.pop("cuda_graphs", False)
    if name == "auto":
        opts["cuda_graphs"] = graphs
    return _BACKENDS[name](num_slots, ctx, bounds or StepBounds(), **opts)
