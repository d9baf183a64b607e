"""Run fn(rank, world, *args) on `world` spawned gloo ranks (127.0.0.1) with a hard timeout.

Results must be picklable without shared memory (numpy arrays, lists), because the ranks exit right
after answering. A rank that raises, dies or hangs fails the calling test.
"""

from __future__ import annotations

import os
import queue
import socket
import traceback
from typing import Any, Callable

import pytest
import torch.multiprocessing as mp


def _entry(rank: int, world: int, port: int, fn: Callable, args: tuple, results: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        results.put((rank, True, fn(rank, world, *args)))
        dist.destroy_process_group()
    except BaseException:
        results.put((rank, False, traceback.format_exc()))


def run_ranks(fn: Callable, world: int, args: tuple = (), timeout_s: float = 300) -> list[Any]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_entry, args=(r, world, port, fn, args, results), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    out: dict[int, Any] = {}
    try:
        while len(out) < world:
            rank, ok, value = results.get(timeout=timeout_s)
            if not ok:
                pytest.fail(f"rank {rank} raised:\n{value}")
            out[rank] = value
    except queue.Empty:
        pytest.fail(f"ranks {sorted(set(range(world)) - set(out))} did not answer within {timeout_s}s")
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return [out[r] for r in range(world)]
