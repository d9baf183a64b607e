"""Pin a single-rank engine process to the cores its front end does not use.

`moeserve serve` leaves `--reserved-cores` (default 1) to the HTTP front end and its clients. Left
unpinned, the kernel's scheduler now and then runs the engine on the same core as a busy front end
or client while the other core idles: a prefill step that takes 36 ms alone took a median 44-72 ms
next to one busy process (docs/performance.md). Pinned, the engine keeps its cores and
the scheduler moves the others away. vLLM's CPU backend binds its worker the same way
(`VLLM_CPU_OMP_THREADS_BIND`).

Only the engine process of a one-rank-per-node world is pinned, before torch starts any thread
(threads inherit the mask). Ranks a multi-rank engine spawns would inherit the engine's mask, so
those worlds stay unpinned. MOESERVE_CPU_BIND=0 turns it off. How many cores are reserved is the
config's (--reserved-cores); this module gives the front end the first ones and the engine the rest.

The reserved cores are the front end's first, but idle much of the time: while a burst of prompts
is prefilled, the front end has handed them over and waits for their first tokens. So the pinned
engine also lends their idle time (`lend_idle_cores`): one inter-op thread per reserved core, pinned
there at SCHED_IDLE, the kernel's lowest priority, which runs only what the core's own processes
leave. The expert loop and the column-split GEMMs fork their second chunk onto it, and take it back
if it has not started when they are done with their own (`kernels/cpu/split_chooser.take`): a busy front
end costs a step a fork, never a wait. Serving tiny-mixtral against vLLM, it cut the TTFT p50 from
40 to 32 ms without the prompt split, and the per-round TTFT p99 from 50.6 to 47.2 with it
(docs/performance.md). MOESERVE_IDLE_HELPERS=0 turns it off.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from moeserve import envs

logger = logging.getLogger(__name__)


def engine_cores(available: list[int], reserved: int, ranks_per_node: int, threads: int = 1) -> list[int] | None:
    """The cores a single-rank engine keeps: all but the first `reserved` of `available` (core 0
    also takes most interrupts), or None when there is nothing to pin: no reservation, more than one
    rank per node, nothing left, or fewer cores left than the `threads` the user asked for
    (--num-threads / --expert-threads are honoured as given: pinned, they would share a core)."""
    if reserved < 1 or ranks_per_node != 1 or len(available) - reserved < max(1, threads):
        return None
    return sorted(available)[reserved:]


def bind_engine_process(reserved: int, ranks_per_node: int, threads: int = 1) -> list[int] | None:
    """Pins the calling process (its threads to come) to `engine_cores`; returns them, or None when
    it did not pin. Call before torch creates its thread pools."""
    if not envs.CPU_BIND.get():
        return None
    try:
        available = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None
    cores = engine_cores(available, reserved, ranks_per_node, threads)
    if cores is None:
        return None
    try:
        os.sched_setaffinity(0, cores)
    except OSError as e:
        logger.warning("could not pin the engine to cores %s (%s); it runs unpinned", cores, e)
        return None
    logger.info("engine pinned to cores %s; %d core(s) left to the front end (MOESERVE_CPU_BIND=0 turns this off)",
                cores, reserved)
    return cores


def lend_idle_cores(cores: list[int]) -> int:
    """Starts torch's inter-op pool with one thread per core of `cores` (cores the engine is not
    pinned to: the front end's), each pinned to its core at SCHED_IDLE, the kernel's lowest
    priority: it runs only what the core's own processes leave idle. The expert loop and the
    column-split GEMMs fork their second chunk onto it (torch.jit.fork) and take the chunk back if
    it has not started when their own is done (kernels/cpu/split_chooser.take). Returns how many helpers
    run (0: none: MOESERVE_IDLE_HELPERS=0, the pool already existed, or the kernel refused). Call
    before anything forks."""
    import torch

    if not cores or not hasattr(os, "SCHED_IDLE") or not envs.IDLE_HELPERS.get():
        return 0
    try:
        torch.set_num_interop_threads(len(cores))
    except RuntimeError:  # the pool exists already: its threads cannot be told apart from others
        return 0
    try:
        before = set(os.listdir("/proc/self/task"))
        _start_interop_pool(torch.ones(1))
        helpers = sorted(int(t) for t in set(os.listdir("/proc/self/task")) - before)
        for tid, core in zip(helpers, cores * len(helpers)):
            os.sched_setaffinity(tid, [core])
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except Exception as e:  # noqa: BLE001 - no /proc, no TorchScript, a kernel that refuses: run without
        logger.warning("could not lend cores %s to the engine at idle priority (%s); it runs without", cores, e)
        return 0
    logger.info("engine lends idle time of cores %s: %d inter-op helper(s) at SCHED_IDLE", cores, len(helpers))
    return len(helpers)


def _start_interop_pool(x):
    import torch

    @torch.jit.script
    def touch(x: torch.Tensor) -> torch.Tensor:
        return torch.jit.wait(torch.jit.fork(torch.neg, x))

    return touch(x)


def pinned(config: Any) -> Any:
    """Pins this process to the cores the front end does not keep (below); the
    reservation is then in the affinity mask, so the thread counts see no further cores reserved."""
    parallel = config.parallel
    available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cores = bind_engine_process(parallel.reserved_cores or 0, parallel.ranks_per_node, parallel.asked_threads())
    if cores is None:
        return config
    parallel = dataclasses.replace(parallel, reserved_cores=0)
    if parallel.expert_threads is None:  # --expert-threads given: the user's count, on the engine's cores
        helpers = lend_idle_cores([c for c in available if c not in cores])
        if helpers:
            parallel = dataclasses.replace(parallel, expert_threads=len(cores) + helpers)
    return dataclasses.replace(config, parallel=parallel)
