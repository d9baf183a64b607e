"""`moeserve serve` pins its (single-rank) engine process to the cores it does not reserve for the
front end, and leaves the front end free to run anywhere (kernels/cpu/cpu_binding.py)."""
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


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two cores")
def test_the_engine_borrows_the_front_ends_core_only_at_idle_priority(server):
    """One engine thread runs on the reserved core, at SCHED_IDLE; every other engine thread stays
    on the engine's cores at normal priority (kernels/cpu/cpu_binding.py lend_idle_cores)."""
    available = sorted(os.sched_getaffinity(0))
    engine = child_pids(server.proc.pid)[0]
    on_reserved = []
    for tid in map(int, os.listdir(f"/proc/{engine}/task")):
        cores, policy = os.sched_getaffinity(tid), os.sched_getscheduler(tid)
        if cores & set(available[:1]):
            on_reserved.append((sorted(cores), policy))
        else:
            assert policy == os.SCHED_OTHER
    assert on_reserved == [(available[:1], os.SCHED_IDLE)]
    assert any("lends idle time of cores" in line for line in server.lines)
