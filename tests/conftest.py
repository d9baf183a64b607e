"""Shared test set-up: tiny-model helpers importable from every test folder, one torch thread per test
process (CI has 2 cores), a scratch cache for the built-in model, and no test leaves the garbage
collector frozen."""
from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "models"))
os.environ.setdefault("MOESERVE_GEMM_WARMUP_ROWS", "0")  # start-up kernel warm-up: seconds over the suite
os.environ.setdefault("MOESERVE_CACHE", str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "moeserve"))

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _unfreeze_the_heap():
    """Tests that run a server process's loop in this process (server/engine_process.py) freeze the
    heap as that process does (engine/gc_heap.py). Frozen objects are never collected, not even at
    exit, so later tests would run on a frozen heap, and the cycles among Triton's IR objects from the
    kernel tests would outlive the interpreter: nanobind then reports them as leaked at exit."""
    yield
    if gc.get_freeze_count():
        gc.unfreeze()


def pytest_runtest_setup(item):
    """`@pytest.mark.gpu` tests need a CUDA GPU: skipped without one (CI runs on CPU)."""
    if item.get_closest_marker("gpu") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


# Variables an engine sets in its own process to keep its sockets on one interface: a one-node world
# it spawns puts gloo and NCCL on loopback (engine/multiproc_executor.py), a NIXL agent confines UCX to
# its host's interface (kv_transfer/nixl_agent.py). A test that runs an engine in the test process must
# not hand them to later tests' processes: simulated hosts launched with GLOO_SOCKET_IFNAME=lo or
# UCX_NET_DEVICES=lo would keep what "the operator set" and never reach each other.
_PROCESS_NETWORK_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "UCX_NET_DEVICES", "MASTER_ADDR", "MASTER_PORT",
                         "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


_NETWORK_VARS_AT_START = {name: os.environ.get(name) for name in _PROCESS_NETWORK_VARS}


@pytest.fixture(autouse=True)
def _network_variables_stay_with_their_test():
    """After each test (module-scoped engines included: they set them before any test of theirs), the
    values the test run started with."""
    yield
    for name, value in _NETWORK_VARS_AT_START.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
