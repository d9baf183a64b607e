"""`moeserve serve` pins its (single-rank) engine process to the cores it does not reserve for the
front end, and leaves the front end free to run anywhere (engine/cpu_binding.py)."""
from __future__ import annotations

import os

import pytest
from server_harness import child_pids


def allowed_cpus(pid: int) -> set[int]:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Cpus_allowed_list:"):
            cores: set[int] = set()
            for part in line.split(":", 1)[1].strip().split(","):
                low, _, high = part.partition("-")
                cores.update(range(int(low), int(high or low) + 1))
            return cores
    raise AssertionError("no Cpus_allowed_list")


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two cores")
def test_engine_keeps_the_cores_the_front_end_does_not(server):
    available = sorted(os.sched_getaffinity(0))
    engines = child_pids(server.proc.pid)
    assert len(engines) == 1
    assert allowed_cpus(engines[0]) == set(available[1:])  # --reserved-cores defaults to 1
    assert allowed_cpus(server.proc.pid) == set(available)
    assert any("engine pinned to cores" in line for line in server.lines)
