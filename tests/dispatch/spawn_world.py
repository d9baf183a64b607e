"""Run a function on N gloo ranks on 127.0.0.1 with a hard timeout, so a hang fails instead of blocking."""
from __future__ import annotations

import os
import queue
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp


class RankFailed(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, fn: Callable[[int, int], Any], results: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        results.put((rank, True, fn(rank, world)))
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - any failure goes back to the parent, which fails the test
        results.put((rank, False, traceback.format_exc()))


def run_world(fn: Callable[[int, int], Any], world: int, timeout_s: float) -> list[Any]:
    """fn(rank, world) on every rank of a fresh gloo world; returns the per-rank results in rank order.

    Raises RankFailed with the first rank's traceback when a rank raises or dies, and TimeoutError
    when the ranks do not all answer within timeout_s; the ranks are killed either way.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world, port, fn, results), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    out: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < world:
            if time.monotonic() > deadline:
                raise TimeoutError(f"ranks {sorted(set(range(world)) - set(out))} did not answer in {timeout_s}s")
            try:
                rank, ok, value = results.get(timeout=1.0)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if r not in out and p.exitcode is not None]
                if dead:
                    raise RankFailed(f"ranks {dead} exited without a result") from None
                continue
            if not ok:
                raise RankFailed(f"rank {rank} raised:\n{value}")
            out[rank] = value
    finally:
        for p in procs:
            p.join(timeout=2)
            if p.is_alive():
                p.kill()
    return [out[r] for r in range(world)]
