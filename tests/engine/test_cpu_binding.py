"""Which cores a single-rank engine keeps once `--reserved-cores` are left to its front end
(kernels/cpu/cpu_binding.py), and that the pinning is applied in a process and can be turned off."""
from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from moeserve.kernels.cpu.cpu_binding import bind_engine_process, engine_cores


def test_the_first_reserved_cores_go_to_the_front_end():
    assert engine_cores([0, 1], 1, 1) == [1]
    assert engine_cores([3, 0, 2, 1], 1, 1) == [1, 2, 3]
    assert engine_cores(list(range(16)), 2, 1) == list(range(2, 16))
    assert engine_cores([4, 5, 6], 1, 1) == [5, 6]  # the cores this process may use, not 0..n


@pytest.mark.parametrize("available, reserved, ranks", [
    ([0, 1], 0, 1),  # nothing reserved (the Python API): nothing to keep apart
    ([0, 1], 1, 2),  # several ranks per node: spawned ranks would inherit the engine's mask
    ([0, 1], 1, 16),
    ([0], 1, 1),  # one core: the reservation leaves nothing to pin to
    ([0, 1], 2, 1),
])
def test_nothing_is_pinned_where_it_would_not_help(available, reserved, ranks):
    assert engine_cores(available, reserved, ranks) is None


def test_threads_asked_for_are_not_crowded_onto_fewer_cores():
    assert engine_cores([0, 1], 1, 1, threads=2) is None  # --num-threads 2 on 2 cores: left unpinned
    assert engine_cores([0, 1, 2], 1, 1, threads=2) == [1, 2]
    assert engine_cores([0, 1, 2, 3], 1, 1, threads=4) is None


def _bind_and_report(queue, env_value):
    if env_value is not None:
        os.environ["MOESERVE_CPU_BIND"] = env_value
    cores = bind_engine_process(1, 1)
    queue.put((cores, sorted(os.sched_getaffinity(0))))


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two cores")
@pytest.mark.parametrize("env_value", [None, "0"])
def test_a_process_is_pinned_unless_switched_off(env_value):
    available = sorted(os.sched_getaffinity(0))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_bind_and_report, args=(queue, env_value))
    proc.start()
    cores, affinity = queue.get(timeout=60)
    proc.join(60)
    if env_value == "0":
        assert cores is None and affinity == available
    else:
        assert cores == available[1:] and affinity == available[1:]
    assert sorted(os.sched_getaffinity(0)) == available  # the parent is untouched


def test_serve_leaves_an_engine_asked_for_more_threads_than_its_cores_unpinned(monkeypatch):
    from moeserve.config import EngineConfig, ParallelConfig
    from moeserve.kernels.cpu import cpu_binding
    from moeserve.server import engine_process

    calls = []
    monkeypatch.setattr(cpu_binding, "bind_engine_process", lambda *a: calls.append(a))
    monkeypatch.delenv("MOESERVE_NUM_THREADS", raising=False)
    monkeypatch.delenv("MOESERVE_EXPERT_THREADS", raising=False)
    engine_process.pinned(EngineConfig(parallel=ParallelConfig(reserved_cores=1, num_threads=2)))
    monkeypatch.setenv("MOESERVE_EXPERT_THREADS", "3")
    engine_process.pinned(EngineConfig(parallel=ParallelConfig(reserved_cores=1)))
    assert calls == [(1, 1, 2), (1, 1, 3)]


def _lend_and_report(queue):
    import torch

    from moeserve.kernels.cpu.cpu_binding import lend_idle_cores

    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})  # the engine's core
    others = sorted(set(range(os.cpu_count())) - os.sched_getaffinity(0))[:1]
    before = set(os.listdir("/proc/self/task"))
    helpers = lend_idle_cores(others)
    new = [int(t) for t in set(os.listdir("/proc/self/task")) - before]
    again = lend_idle_cores(others)  # the pool exists now: nothing more to lend
    queue.put((others, helpers, again, [(sorted(os.sched_getaffinity(t)), os.sched_getscheduler(t)) for t in new],
               sorted(os.sched_getaffinity(0)), os.sched_getscheduler(0), torch.get_num_interop_threads()))


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE") or len(os.sched_getaffinity(0)) < 2, reason="needs Linux and two cores")
def test_the_front_ends_core_is_lent_to_one_helper_thread_at_idle_priority():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_lend_and_report, args=(queue,))
    proc.start()
    others, helpers, again, threads, main_affinity, main_policy, interop = queue.get(timeout=120)
    proc.join(60)
    assert helpers == 1 and again == 0 and interop == 1
    assert threads == [(others, os.SCHED_IDLE)]  # exactly the pool's thread, on the lent core, lowest priority
    assert main_affinity != others and main_policy == os.SCHED_OTHER  # the engine's own thread is untouched



def _lend_switched_off(queue):
    os.environ["MOESERVE_IDLE_HELPERS"] = "0"
    from moeserve.kernels.cpu.cpu_binding import lend_idle_cores

    queue.put(lend_idle_cores([0]))
    import torch

    torch.set_num_interop_threads(3)  # raises if lend_idle_cores had set up the pool


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="needs Linux")
def test_lending_is_switched_off_by_its_variable():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_lend_switched_off, args=(queue,))
    proc.start()
    assert queue.get(timeout=120) == 0
    proc.join(60)
    assert proc.exitcode == 0  # the pool was untouched: its size could still be set
